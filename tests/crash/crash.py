"""Writer and checker for scripts/crash-test (kill -9 of the server under load).

    crash.py setup  --port P
    crash.py write  --port P --round R --log FILE [--threads N] [--max-seconds S]
    crash.py verify --port P --http-port H LOG...

`write` runs N connections doing INSERTs with ids unique across rounds, until
the server goes away (or S seconds pass). Each connection but the last does
single-row autocommit INSERTs; the last does 3-row transactions. It logs, one
line per event, flushed at once:

    S <id>...          before the statement (or transaction) is sent
    A <lsn> <id>...    after the server acknowledged the commit, with the
                       aqueduct.last_lsn the server reported for it
    E <state> <id>...  after the server refused it with an error (not a lost
                       connection): the rows must not exist

`verify` reads every log and the table, and checks, over all rounds so far:
acknowledged ⊆ present ⊆ sent; refused ∩ present = ∅; a transaction's rows
are all present or all absent; no id twice and count(*) agrees; every
payload is the one sent; the per-round counts through the index on `round`
agree with a full scan; and /health's LSN is at least every acknowledged LSN.
"""

import argparse
import collections
import json
import sys
import threading
import time
import urllib.request

import psycopg

TABLE = "crash_rows"
TXN_ROWS = 3


def connect(port):
    # User, database (and password, if any) from PGUSER, PGDATABASE, PGPASSWORD.
    return psycopg.connect(host="127.0.0.1", port=port, autocommit=True, connect_timeout=5)


def payload(row_id):
    # Deterministic, of varying length (20 to ~400 bytes), so a row that came
    # back damaged or from another id shows.
    return f"row-{row_id}-" + "x" * (row_id * 7919 % 381)


def setup(args):
    with connect(args.port) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigint PRIMARY KEY, round integer NOT NULL, payload text NOT NULL)"
        )
        conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_round ON {TABLE} (round)")


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def line(self, *fields):
        with self.lock:
            self.f.write(" ".join(str(x) for x in fields) + "\n")
            self.f.flush()


def writer(args, thread_no, log, deadline, counts):
    # ids: round * 10^7 + thread * 10^6 + sequence: unique across rounds.
    base = args.round * 10_000_000 + thread_no * 1_000_000
    txn_mode = thread_no == args.threads - 1
    seq = 0
    try:
        conn = connect(args.port)
    except psycopg.OperationalError:
        return
    try:
        while time.monotonic() < deadline and seq < 900_000:
            ids = [base + seq + k for k in range(TXN_ROWS if txn_mode else 1)]
            seq += len(ids)
            log.line("S", *ids)
            try:
                if txn_mode:
                    with conn.transaction():
                        for i in ids:
                            conn.execute(
                                f"INSERT INTO {TABLE} (id, round, payload) VALUES (%s, %s, %s)",
                                (i, args.round, payload(i)),
                            )
                else:
                    conn.execute(
                        f"INSERT INTO {TABLE} (id, round, payload) VALUES (%s, %s, %s)",
                        (ids[0], args.round, payload(ids[0])),
                    )
            except psycopg.OperationalError:
                return  # the server went away: what was in flight is unknown
            except psycopg.Error as e:
                if conn.closed or e.sqlstate is None:
                    return
                log.line("E", e.sqlstate, *ids)
                counts["refused"] += 1
                continue
            lsn = conn.info.parameter_status("aqueduct.last_lsn") or "0"
            log.line("A", lsn, *ids)
            counts["acked"] += len(ids)
    finally:
        try:
            conn.close()
        except Exception:
            pass


def write(args):
    log = Log(args.log)
    deadline = time.monotonic() + args.max_seconds
    counts = collections.Counter()
    threads = [
        threading.Thread(target=writer, args=(args, n, log, deadline, counts), daemon=True)
        for n in range(args.threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"round {args.round}: {counts['acked']} rows acknowledged, {counts['refused']} statements refused")


def verify(args):
    sent, acked, refused = set(), set(), {}
    groups = []  # the ids of each multi-row transaction
    max_lsn = 0
    for path in args.logs:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if not line.endswith("\n"):
                    continue  # a line cut short (cannot happen: the writer is not killed)
                kind = fields[0]
                if kind == "S":
                    ids = [int(x) for x in fields[1:]]
                    sent.update(ids)
                    if len(ids) > 1:
                        groups.append(ids)
                elif kind == "A":
                    max_lsn = max(max_lsn, int(fields[1]))
                    acked.update(int(x) for x in fields[2:])
                elif kind == "E":
                    for x in fields[2:]:
                        refused[int(x)] = fields[1]

    problems = []

    def problem(msg, ids=()):
        ids = sorted(ids)
        sample = f": {ids[:10]}{' ...' if len(ids) > 10 else ''}" if ids else ""
        problems.append(f"{msg}{sample}")

    with connect(args.port) as conn:
        rows = conn.execute(f"SELECT id, round, payload FROM {TABLE}").fetchall()
        (count,) = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
        per_round_index = {}
        for r in sorted({r[1] for r in rows}):
            (n,) = conn.execute(f"SELECT count(*) FROM {TABLE} WHERE round = %s", (r,)).fetchone()
            per_round_index[r] = n

    present = [r[0] for r in rows]
    present_set = set(present)
    if len(present) != len(present_set):
        dup = [i for i, c in collections.Counter(present).items() if c > 1]
        problem(f"{len(dup)} ids appear more than once", dup)
    if count != len(present):
        problem(f"count(*) is {count} but a full scan returns {len(present)} rows")
    lost = acked - present_set
    if lost:
        problem(f"{len(lost)} acknowledged rows are missing", lost)
    invented = present_set - sent
    if invented:
        problem(f"{len(invented)} rows exist that were never sent", invented)
    refused_present = present_set & set(refused)
    if refused_present:
        problem(f"{len(refused_present)} rows exist whose INSERT the server refused", refused_present)
    bad = [r[0] for r in rows if r[2] != payload(r[0]) or r[1] != r[0] // 10_000_000]
    if bad:
        problem(f"{len(bad)} rows have a payload or round other than the one sent", bad)
    torn = [g for g in groups if 0 < len(present_set.intersection(g)) < len(g)]
    if torn:
        problem(f"{len(torn)} transactions are partly present", [i for g in torn for i in g])
    per_round_scan = collections.Counter(r[1] for r in rows)
    if dict(per_round_scan) != per_round_index:
        problem(f"per-round counts through the index {per_round_index} differ from a full scan {dict(per_round_scan)}")

    with urllib.request.urlopen(f"http://127.0.0.1:{args.http_port}/health", timeout=5) as r:
        health = json.load(r)
    if int(health.get("lsn", -1)) < max_lsn:
        problem(f"/health reports LSN {health.get('lsn')} but a commit at LSN {max_lsn} was acknowledged")

    in_doubt = len(present_set & (sent - acked))
    if refused:
        states = collections.Counter(refused.values())
        print(f"note: the server refused {len(refused)} rows' statements: {dict(states)}")
    if problems:
        for p in problems:
            print(f"crash test: FAILED: {p}", file=sys.stderr)
        sys.exit(1)
    print(
        f"verified: {len(present_set)} rows present, {len(acked)} acknowledged, "
        f"{in_doubt} in flight at a crash and kept, {len(sent - acked - present_set)} in flight and lost, "
        f"LSN {health.get('lsn')} >= {max_lsn}"
    )


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--port", type=int, required=True)
    w = sub.add_parser("write")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--round", type=int, required=True)
    w.add_argument("--log", required=True)
    w.add_argument("--threads", type=int, default=4)
    w.add_argument("--max-seconds", type=float, default=20)
    v = sub.add_parser("verify")
    v.add_argument("--port", type=int, required=True)
    v.add_argument("--http-port", type=int, required=True)
    v.add_argument("logs", nargs="+")
    args = p.parse_args()
    {"setup": setup, "write": write, "verify": verify}[args.cmd](args)


if __name__ == "__main__":
    main()

"""Client-compatibility test: Python psycopg 3 against a running server.

Connects with the libpq environment variables (PGHOST, PGPORT, PGUSER,
PGPASSWORD, PGDATABASE), works on its own table `client_python`, and exits
non-zero with a message naming the first mismatch. CLIENT_TEST_TARGET=postgres
skips the Aqueduct-only checks, to debug this program against PostgreSQL.

Run by scripts/client-tests.
"""

import datetime as dt
import os
import sys
import uuid
from decimal import Decimal

import psycopg
import psycopg.errors
from psycopg.types.json import Json, Jsonb

TABLE = "client_python"
AQUEDUCT = os.environ.get("CLIENT_TEST_TARGET", "aqueduct") == "aqueduct"


def fail(msg):
    print(f"client python: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(what, got, want):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")


def check_type(what, got, want_type):
    if type(got) is not want_type:
        fail(f"{what}: got a {type(got).__name__} ({got!r}), want a {want_type.__name__}")


# One row of every supported type; values chosen at the edges (widest
# integers, bytes that need escaping, non-ASCII text, a leap day, a time zone
# other than UTC) so a lossy conversion shows.
ROW = {
    "id": 1,
    "small": -32768,
    "i": 2147483647,
    "big": 9007199254740993,  # 2^53 + 1: loses precision through a double
    "r": 1.5,
    "d": 3.141592653589793,
    "n": Decimal("1234567890123456.789012345678"),
    "b": True,
    "t": "it's \"quoted\" \\ ünïcödé ✓ 🚀",
    "v": "short",
    "by": bytes([0, 1, 2, 39, 92, 127, 128, 255]) + "é".encode(),
    "ts": dt.datetime(2024, 2, 29, 23, 59, 58, 123456),
    "tstz": dt.datetime(2024, 3, 5, 12, 34, 56, 789012, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "dt": dt.date(2024, 2, 29),
    "u": uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "j": {"a": 1, "b": [True, None, "x"], "nested": {"k": "v"}},
    "js": {"plain": "json", "n": 2.5},
}
COLUMNS = list(ROW)


class KnownIssue(Exception):
    pass


def known_issue(what, probe):
    """Runs `probe`, a check of an incompatibility that once existed and
    was fixed: it must pass now."""
    try:
        probe()
    except (psycopg.Error, KnownIssue) as e:
        raise AssertionError(f"regression: {what}: {e}") from e


def known_issues():
    def deallocate_after_ddl():
        # psycopg sends DEALLOCATE ALL after a DROP or ALTER TABLE on a
        # connection holding prepared statements, which Aqueduct refuses.
        with psycopg.connect(autocommit=True, connect_timeout=10) as c:
            c.execute("DROP TABLE IF EXISTS client_python_scratch")
            c.execute("CREATE TABLE client_python_scratch (id bigint PRIMARY KEY)")
            c.execute("SELECT id FROM client_python_scratch WHERE id = %s", (1,), prepare=True)
            try:
                c.execute("DROP TABLE client_python_scratch")
            finally:
                with psycopg.connect(autocommit=True, connect_timeout=10) as c2:
                    c2.execute("DROP TABLE IF EXISTS client_python_scratch")

    known_issue("DROP TABLE on a connection with prepared statements (psycopg then sends DEALLOCATE ALL)",
                deallocate_after_ddl)

    def extended_error_in_transaction():
        # With parameters psycopg uses the extended protocol; an error at
        # Parse or Bind must abort the transaction as one at Execute does.
        with psycopg.connect(autocommit=True, connect_timeout=10) as c:
            for what, sql, params, state in [
                ("Parse", "SELECT * FROM client_python_no_such_table WHERE id = %s", (1,), "42P01"),
                ("Bind", f"SELECT * FROM {TABLE} WHERE id = %s::bigint", ("not a number",), "22P02"),
            ]:
                c.execute("BEGIN")
                c.execute(f"INSERT INTO {TABLE} (id, t) VALUES (%s, %s)", (13, "doomed"))
                try:
                    c.execute(sql, params)
                except psycopg.Error as e:
                    check(f"SQLSTATE of an error at {what}", e.sqlstate, state)
                status = c.info.transaction_status
                c.execute("ROLLBACK")
                if status != psycopg.pq.TransactionStatus.INERROR:
                    raise KnownIssue(
                        f"after an error at {what} the transaction is {status.name}, not INERROR: "
                        "the next statement would run and COMMIT would commit the INSERT before it"
                    )

    known_issue("an error at Parse or Bind inside a transaction does not abort it", extended_error_in_transaction)


def main():
    conn = psycopg.connect(autocommit=True, connect_timeout=10)
    cur = conn.cursor()

    cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
    cur.execute(
        f"""CREATE TABLE {TABLE} (
            id bigint PRIMARY KEY,
            small smallint,
            i integer,
            big bigint,
            r real,
            d double precision,
            n numeric,
            b boolean,
            t text,
            v varchar(20),
            by bytea,
            ts timestamp,
            tstz timestamptz,
            dt date,
            u uuid,
            j jsonb,
            js json,
            note text NOT NULL DEFAULT 'none'
        )"""
    )

    # Insert with a parameter of every type; RETURNING gives the row back.
    params = dict(ROW, j=Jsonb(ROW["j"]), js=Json(ROW["js"]))
    placeholders = ", ".join(f"%({c})s" for c in COLUMNS)
    cur.execute(
        f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({placeholders}) RETURNING id, note",
        params,
    )
    check("INSERT ... RETURNING", cur.fetchone(), (1, "none"))
    check("INSERT rowcount", cur.rowcount, 1)
    if AQUEDUCT:
        lsn1 = conn.info.parameter_status("aqueduct.last_lsn")
        if lsn1 is None or not lsn1.isdigit() or int(lsn1) <= 0:
            fail(f"ParameterStatus aqueduct.last_lsn after a write: got {lsn1!r}, want a positive integer")
        cur.execute("SHOW aqueduct.last_lsn")
        check("SHOW aqueduct.last_lsn", cur.fetchone()[0], lsn1)

    # Read back: every value and its Python type survive the round trip,
    # in text and in binary result format.
    for binary in (False, True):
        fmt = "binary" if binary else "text"
        bcur = conn.cursor(binary=binary)
        bcur.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE id = %s", (1,))
        got = bcur.fetchall()
        check(f"rows read back ({fmt})", len(got), 1)
        row = dict(zip(COLUMNS, got[0]))
        for c in COLUMNS:
            want = ROW[c]
            if c == "tstz":
                check_type(f"column tstz ({fmt})", row[c], dt.datetime)
                if row[c].tzinfo is None:
                    fail(f"column tstz ({fmt}): got a naive datetime {row[c]!r}")
            elif c in ("j", "js"):
                check_type(f"column {c} ({fmt})", row[c], dict)
            else:
                check_type(f"column {c} ({fmt})", row[c], type(want))
            check(f"column {c} ({fmt})", row[c], want)

    # NULLs of every type, and a multi-row insert.
    nulls = ", ".join("%s" for _ in COLUMNS[1:])
    cur.execute(
        f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES (%s, {nulls}), (%s, {nulls})",
        [2] + [None] * (len(COLUMNS) - 1) + [3] + [None] * (len(COLUMNS) - 1),
    )
    check("multi-row INSERT rowcount", cur.rowcount, 2)
    cur.execute(f"SELECT {', '.join(COLUMNS[1:])}, note FROM {TABLE} WHERE id = %s", (3,))
    check("NULLs read back", cur.fetchone(), tuple([None] * (len(COLUMNS) - 1)) + ("none",))

    # Parameters in WHERE of several types.
    cur.execute(
        f"SELECT id FROM {TABLE} WHERE u = %s AND tstz = %s AND b = %s AND by = %s AND n = %s",
        (ROW["u"], ROW["tstz"], True, ROW["by"], ROW["n"]),
    )
    check("SELECT with typed parameters in WHERE", cur.fetchall(), [(1,)])

    # UPDATE ... RETURNING; UPSERT.
    cur.execute(f"UPDATE {TABLE} SET t = %s, small = small + 1 WHERE id = %s RETURNING t, small", ("updated", 1))
    check("UPDATE ... RETURNING", cur.fetchall(), [("updated", -32767)])
    check("UPDATE rowcount", cur.rowcount, 1)
    cur.execute(
        f"INSERT INTO {TABLE} (id, t) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET t = excluded.t RETURNING id, t",
        (2, "upserted"),
    )
    check("INSERT ... ON CONFLICT DO UPDATE", cur.fetchall(), [(2, "upserted")])
    cur.execute(f"INSERT INTO {TABLE} (id, t) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING", (2, "ignored"))
    check("ON CONFLICT DO NOTHING rowcount", cur.rowcount, 0)

    # Aggregates.
    cur.execute(f"SELECT count(*), max(id), min(t) FROM {TABLE}")
    check("aggregates", cur.fetchone(), (3, 3, "updated"))

    # Transactions: a rolled-back block leaves nothing; a committed one stays.
    class Rollback(Exception):
        pass

    try:
        with conn.transaction():
            cur.execute(f"INSERT INTO {TABLE} (id, t) VALUES (%s, %s)", (10, "rolled back"))
            cur.execute(f"SELECT count(*) FROM {TABLE} WHERE id = %s", (10,))
            check("own write inside a transaction", cur.fetchone()[0], 1)
            raise Rollback()
    except Rollback:
        pass
    cur.execute(f"SELECT count(*) FROM {TABLE} WHERE id = %s", (10,))
    check("row of a rolled-back transaction", cur.fetchone()[0], 0)
    with conn.transaction():
        cur.execute(f"INSERT INTO {TABLE} (id, t) VALUES (%s, %s)", (11, "committed"))
        cur.execute(f"UPDATE {TABLE} SET note = %s WHERE id = %s", ("in txn", 11))
    cur.execute(f"SELECT t, note FROM {TABLE} WHERE id = %s", (11,))
    check("row of a committed transaction", cur.fetchone(), ("committed", "in txn"))
    if AQUEDUCT:
        lsn2 = conn.info.parameter_status("aqueduct.last_lsn")
        if lsn2 is None or int(lsn2) <= int(lsn1):
            fail(f"aqueduct.last_lsn did not advance after a commit: {lsn1!r} then {lsn2!r}")

    # Errors carry their SQLSTATE; the connection stays usable.
    try:
        cur.execute("SELECT * FROM client_python_no_such_table")
        fail("SELECT from a missing table succeeded")
    except psycopg.errors.UndefinedTable as e:
        check("SQLSTATE of a missing table", e.sqlstate, "42P01")
    try:
        cur.execute(f"INSERT INTO {TABLE} (id) VALUES (%s)", (1,))
        fail("INSERT of a duplicate primary key succeeded")
    except psycopg.errors.UniqueViolation as e:
        check("SQLSTATE of a duplicate key", e.sqlstate, "23505")
    try:
        with conn.transaction():
            cur.execute(f"INSERT INTO {TABLE} (id, t) VALUES (%s, %s)", (12, "doomed"))
            cur.execute("SELECT * FROM client_python_no_such_table")
        fail("a transaction with a failing statement committed")
    except psycopg.errors.UndefinedTable:
        pass
    cur.execute(f"SELECT count(*) FROM {TABLE} WHERE id = %s", (12,))
    check("row of a transaction that failed", cur.fetchone()[0], 0)

    # DELETE ... RETURNING, then the table holds what is left.
    cur.execute(f"DELETE FROM {TABLE} WHERE id IN (%s, %s) RETURNING id", (2, 3))
    check("DELETE ... RETURNING", sorted(r[0] for r in cur.fetchall()), [2, 3])
    cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (999,))
    check("DELETE of no row rowcount", cur.rowcount, 0)
    cur.execute(f"SELECT id FROM {TABLE} ORDER BY id DESC LIMIT 5")
    check("rows left", cur.fetchall(), [(11,), (1,)])

    # Server-side prepared statements (psycopg prepares by itself any query
    # run prepare_threshold = 5 times), on a connection of their own: see
    # the known issue below.
    with psycopg.connect(autocommit=True, connect_timeout=10) as pconn:
        for k in range(6):
            row = pconn.execute(f"SELECT t FROM {TABLE} WHERE id = %s", (11,)).fetchone()
            check(f"statement prepared by psycopg, run {k + 1}", row, ("committed",))
            row = pconn.execute(f"SELECT note FROM {TABLE} WHERE id = %s", (11,), prepare=True).fetchone()
            check(f"statement prepared on request, run {k + 1}", row, ("in txn",))

    known_issues()

    cur.execute(f"DROP TABLE {TABLE}")
    conn.close()
    print("client python: ok")


if __name__ == "__main__":
    try:
        main()
    except psycopg.Error as e:
        diag = getattr(e, "sqlstate", None)
        fail(f"unexpected {type(e).__name__} (SQLSTATE {diag}): {e}")

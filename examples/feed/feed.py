#!/usr/bin/env python3
"""The feed example: one Twitter-like workload, timelines served four ways.

A follow graph and a tweet history are generated with the parameters of the
Yahoo! PNUTS feed-following experiment that "Poor Man's Social Network"
(Table 1) reuses, scaled down, and written to Aqueduct and to PostgreSQL.
While one writer keeps posting tweets and retweets and following and
unfollowing (the same writes, in the same order, on both), the users'
timelines (each user's 20 newest tweets by the users they follow) are read,
phase after phase, in these ways:

  postgres     the timeline query, a prepared statement, run per read in
               PostgreSQL;
  eventual     the same prepared statement sent to Aqueduct, which answers
               it from a maintained view keyed on the follower (an
               automatic view), read with eventual consistency;
  release      feedclient.py: each user's timeline assembled on the client
               from Aqueduct's releases (time maps and change sets), fetched
               through nginx, which caches them;
  release-sql  the prepared statement sent to Aqueduct in release mode.

Every read is recorded (who, when, which tweets, and for the release way
which release). Afterwards the reads are checked against the writer's own
log of what it wrote and when (see Analysis for the exact checks), and the
staleness of every tweet is measured: the time from its commit to the
first read that showed it. With --check, any release-mode read that differs
from the timeline computed from the log as of its release, any anomaly in
the release or postgres reads, or any way that does not converge to the
final state once the writes stop, fails the run.

The servers are started by the caller (scripts/feed-test); this program is
told their ports and process ids:

    python3 feed.py --aq-port P --aq-http-port H --pg-port Q --nginx-port N \\
        --aq-pid A --pg-pid B --nginx-pid C --nginx-log LOG --check \\
        --phases postgres,eventual,release,release@500

Needs psycopg 3 (`pip install "psycopg[binary]"`). The example owns the
tables users, follows and tweets, in both databases, and the time maps
tweets_by_author and follows_by_follower in Aqueduct: it drops and
recreates them. `python3 feed.py --self-test` checks the checks alone.
"""

import argparse
import bisect
import heapq
import itertools
import json
import multiprocessing
import os
import pickle
import platform
import queue
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from feedclient import FeedClient, duration_text  # noqa: E402

K = 20  # timeline length
TIMELINE_SQL = (
    "SELECT t.id, t.author, t.body, t.retweet_of FROM follows f "
    "JOIN tweets t ON t.author = f.followee "
    "WHERE f.follower = %s ORDER BY t.id DESC LIMIT 20"
)
WAYS = ("postgres", "eventual", "release", "release-sql")
WAY_TITLES = {
    "postgres": "(a) PostgreSQL, query per read",
    "eventual": "(b) Aqueduct, maintained view, eventual",
    "release": "(c) Aqueduct releases, client assembly behind nginx",
    "release-sql": "(d) Aqueduct, query per read in release mode",
}
RELEASE_WAYS = ("release", "release-sql")
# The server processes that answer each way's reads.
SERVERS_OF = {
    "postgres": ("postgres",),
    "eventual": ("aqueduct",),
    "release": ("aqueduct", "nginx"),
    "release-sql": ("aqueduct",),
}
TIME_MAPS = (("tweets_by_author", "tweets", "author"), ("follows_by_follower", "follows", "follower"))
# Time-map periods, in release intervals: with 1 s releases, the
# paper's 1 s (the release), 5 s, 30 s and 3 min.
PERIOD_STEPS = (1, 5, 30, 180)

WORDS = (
    "morning coffee release train dataflow cache snapshot timeline follow "
    "retweet lunch rain sunny deploy rollback friday weekend conference talk "
    "paper review benchmark latency throughput replica log index query"
).split()


# --------------------------------------------------------------------------
# Workload generation (Table 1 of the paper, scaled)
# --------------------------------------------------------------------------


class Zipf:
    """Picks items with zipf weights: the item of rank k has weight 1/k^s.
    Ranks are a random permutation unless given."""

    def __init__(self, rng, items, s, ranks=None):
        self.rng = rng
        self.items = list(items)
        if ranks is None:
            ranks = list(range(1, len(self.items) + 1))
            rng.shuffle(ranks)
        self.ranks = dict(zip(self.items, ranks))
        self.cum = list(itertools.accumulate(1.0 / r**s for r in ranks))

    def pick(self):
        x = self.rng.random() * self.cum[-1]
        return self.items[min(bisect.bisect_right(self.cum, x), len(self.items) - 1)]


class Workload:
    """Who follows whom and who tweets how much.

    Table 1 of the paper (the PNUTS experiment's parameters): about a third
    of the users are producers (67,921 of 200,000); a consumer follows 4.63
    to 5.1 producers on average; the number of followers a producer has is
    zipf-distributed with exponent 0.39 ("consumers per producer"), the
    number of producers a consumer follows with exponent 0.62 ("producers
    per consumer"); how often a producer tweets has exponent 0.57
    ("per-producer rate") and how often a consumer reads its timeline 0.62
    ("per-consumer rate"). The edges are drawn as in YCSB: each picks a
    consumer by the 0.62 law and a producer by the 0.39 law (duplicates and
    self-follows dropped). A user's tweet rate and read rate are independent
    of its place in the graph (their own random ranks)."""

    def __init__(self, args):
        self.rng = random.Random(args.seed)
        rng = self.rng
        n = args.users
        self.users = list(range(1, n + 1))
        self.producers = sorted(rng.sample(self.users, max(2, round(n * args.producer_share))))
        self.followee_law = Zipf(rng, self.users, 0.62)  # who follows many
        self.follower_law = Zipf(rng, self.producers, 0.39)  # who is followed by many
        self.tweet_law = Zipf(rng, self.producers, 0.57)  # who tweets often
        self.read_law = Zipf(rng, self.users, 0.62)  # who reads often
        want = round(n * args.followees)
        edges = set()
        for _ in range(want * 50):
            if len(edges) >= want:
                break
            f, p = self.followee_law.pick(), self.follower_law.pick()
            if f != p:
                edges.add((f, p))
        self.edges = sorted(edges)


def body_text(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))


# --------------------------------------------------------------------------
# The writer's log: the ground truth every read is checked against
# --------------------------------------------------------------------------


class Log:
    """Every write, in the order it was made (one writer, so this is the
    commit order in both databases), with its Aqueduct LSN and when it was
    sent and acknowledged by each database. seq = position + 1; seq 0 is
    "nothing written yet"."""

    def __init__(self):
        self.kinds = []
        self.aq_lsn, self.aq_sent, self.aq_ack = [], [], []
        self.pg_sent, self.pg_ack = [], []
        self.follow_events = defaultdict(list)  # follower -> [(seq, followee, following?)]
        self.author_tweets = defaultdict(list)  # author -> [(seq, id)], ascending
        self.tweet = {}  # id -> (author, retweet_of, seq)

    def __len__(self):
        return len(self.kinds)

    def append(self, kind, payload, aq_lsn, aq_sent, aq_ack, pg_sent, pg_ack):
        seq = len(self.kinds) + 1
        self.kinds.append(kind)
        self.aq_lsn.append(aq_lsn)
        self.aq_sent.append(aq_sent)
        self.aq_ack.append(aq_ack)
        self.pg_sent.append(pg_sent)
        self.pg_ack.append(pg_ack)
        if kind == "tweets":
            for tid, author, retweet_of in payload:
                self.tweet[tid] = (author, retweet_of, seq)
                self.author_tweets[author].append((seq, tid))
        elif kind in ("follow", "unfollow"):
            for follower, followee in payload:
                self.follow_events[follower].append((seq, followee, kind == "follow"))
        return seq


# --------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------


class Analysis:
    """Checks reads against the log.

    For a read of user U's timeline that started at t0 and ended at t1 and
    returned the tweets R (ids, newest first):

    - the admissible snapshots: a release read must be the state as of its
      release, i.e. after exactly the writes whose LSN is at most the
      release's LSN (seq s_r); any other read may be any state up to the
      last write sent before t1 (s_hi), its database's or Aqueduct's;
    - the visible point: for a release read s_r; for the others, the last
      write acknowledged before t0 (s_vis): what the user has been told is
      done when asking.

    oracle(U, s) = the K newest tweets by the users U follows after the
    first s writes. Each read is counted under:

    - mismatch (release reads): R != oracle(U, s_r).
    - torn: R is oracle(U, s) for no s <= s_hi (not a state the data was
      ever in; a release read: for no s but s_r).
    - (1) retweet anomaly: R shows a retweet X of T but not T, T ranks
      within R (T newer than R's oldest, or R shorter than K), and U
      followed T's author at X's commit and did not change that follow
      until s_hi: every state that has X has T and the follow.
    - (2a) unfollow anomaly: R shows a tweet by A although U's unfollow of A
      is at or before the visible point and no follow of A by U came after
      it up to s_hi.
    - (2b) follow anomaly: R shows a tweet by A although no follow of A by U
      was written at or before s_hi.
    - (2c) partial follow: R shows a tweet by A and misses another tweet Y
      by A that ranks within R and was committed before R's newest tweet:
      A's tweets appear together, with the follow that made them visible,
      or not at all.
    """

    def __init__(self, log, k=K):
        self.log, self.k = log, k
        self.author_seqs = {a: [s for s, _ in lst] for a, lst in log.author_tweets.items()}
        self._relevant = {}
        # (follower, followee) -> ([seq], [following?]) of its follows and
        # unfollows; follower -> ([seq], [set of followees after it]).
        self.pairs = {}
        self.states = {}
        for u, events in log.follow_events.items():
            cur, seqs, sets = set(), [], []
            for seq, a, on in events:
                pl = self.pairs.setdefault((u, a), ([], []))
                pl[0].append(seq)
                pl[1].append(on)
                if on:
                    cur.add(a)
                else:
                    cur.discard(a)
                if seqs and seqs[-1] == seq:
                    sets[-1] = frozenset(cur)
                else:
                    seqs.append(seq)
                    sets.append(frozenset(cur))
            self.states[u] = (seqs, sets)

    # --- the log as of seq s -------------------------------------------------

    def followees(self, u, s):
        seqs, sets = self.states.get(u, ((), ()))
        i = bisect.bisect_right(seqs, s)
        return sets[i - 1] if i else frozenset()

    def follow_state(self, u, a, s):
        """True or False as U's last follow or unfollow of A at or before
        s made it; None if there was none."""
        seqs, ons = self.pairs.get((u, a), ((), ()))
        i = bisect.bisect_right(seqs, s)
        return ons[i - 1] if i else None

    def follow_changes(self, u, a, lo, hi, follows_only=False):
        """Whether U followed (or unfollowed) A by a write in (lo, hi]."""
        seqs, ons = self.pairs.get((u, a), ((), ()))
        i, j = bisect.bisect_right(seqs, lo), bisect.bisect_right(seqs, hi)
        return any(ons[i:j]) if follows_only else i < j

    def oracle(self, u, s):
        cand = []
        for a in self.followees(u, s):
            lst = self.log.author_tweets.get(a)
            if not lst:
                continue
            n = bisect.bisect_right(self.author_seqs[a], s)
            cand.extend(tid for _, tid in lst[max(0, n - self.k) : n])
        return heapq.nlargest(self.k, cand)

    def relevant(self, u):
        """The writes after which oracle(u, .) may change (a superset)."""
        r = self._relevant.get(u)
        if r is None:
            ev = self.log.follow_events.get(u, ())
            seqs = {seq for seq, _, _ in ev}
            for a in {a for _, a, _ in ev}:
                seqs.update(self.author_seqs.get(a, ()))
            r = self._relevant[u] = sorted(seqs)
        return r

    def seq_of_lsn(self, lsn):
        return bisect.bisect_right(self.log.aq_lsn, lsn)

    def acked_before(self, t, db):
        return bisect.bisect_right(self.log.pg_ack if db == "pg" else self.log.aq_ack, t)

    def sent_before(self, t, db):
        return bisect.bisect_right(self.log.pg_sent if db == "pg" else self.log.aq_sent, t)

    # --- one read ------------------------------------------------------------------

    def consistent_somewhere(self, u, ids, s_hi):
        seqs = [self.log.tweet[t][2] for t in ids]
        lo = max(seqs, default=0)
        if lo > s_hi:
            return False
        rel = self.relevant(u)
        i, j = bisect.bisect_right(rel, lo), bisect.bisect_right(rel, s_hi)
        # From the newest admissible state down: the likeliest match first.
        for s in itertools.chain(reversed(rel[i:j]), (lo,)):
            if self.oracle(u, s) == ids:
                return True
        return False

    def check(self, way, u, t0, t1, ids, release_lsns=None):
        """The flags of one read. For a release read, release_lsns lists the
        LSNs of the releases it may have read (one when the reader knows
        which): it must equal the oracle as of one of them."""
        log, k = self.log, self.k
        ids = list(ids)
        flags = set()
        if any(t not in log.tweet for t in ids):
            flags.add("torn")
            return flags, None
        if way in RELEASE_WAYS:
            seqs = [self.seq_of_lsn(lsn) for lsn in release_lsns]
            match = [s for s in seqs if ids == self.oracle(u, s)]
            s_vis = s_hi = match[-1] if match else seqs[-1]
            if not match:
                flags.add("mismatch")
                flags.add("torn")
        else:
            db = "pg" if way == "postgres" else "aq"
            s_vis, s_hi = self.acked_before(t0, db), self.sent_before(t1, db)
            if not self.consistent_somewhere(u, ids, s_hi):
                flags.add("torn")
        shown = set(ids)
        floor_id = ids[-1] if len(ids) >= k else 0  # a tweet ranks within R if newer
        authors = set()
        newest_seq = 0
        for x in ids:
            author, rt, seq = log.tweet[x]
            authors.add(author)
            newest_seq = max(newest_seq, seq)
            if rt is not None and rt not in shown and rt > floor_id and rt in log.tweet:
                a = log.tweet[rt][0]
                if self.follow_state(u, a, seq) and not self.follow_changes(u, a, seq, s_hi):
                    flags.add("retweet")
        for a in authors:
            if self.follow_state(u, a, s_vis) is False and not self.follow_changes(u, a, s_vis, s_hi, True):
                flags.add("unfollow")
            if not self.follow_changes(u, a, -1, s_hi, True):
                flags.add("follow")
            lst = log.author_tweets[a]
            n = bisect.bisect_right(self.author_seqs[a], newest_seq)
            for _, tid in reversed(lst[:n]):
                if tid <= floor_id:
                    break
                if tid not in shown:
                    flags.add("partial")
                    break
        return flags, s_vis


ANOMALIES = ("torn", "retweet", "unfollow", "follow", "partial")


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(p / 100 * (len(sorted_values) - 1)))))
    return sorted_values[i]


def self_test():
    """The checks on a small hand-made history, including reads that must be
    flagged: a check that never fires proves nothing."""
    log = Log()
    t = [0.0]

    def w(kind, payload):
        t[0] += 1.0
        return log.append(kind, payload, int(t[0] * 10), t[0], t[0] + 0.1, t[0] + 0.2, t[0] + 0.3)

    # users 1 (reader), 2, 3, 4 (authors)
    w("follow", [(1, 2), (1, 3)])  # seq 1
    w("tweets", [(10, 2, None)])  # seq 2
    w("tweets", [(11, 3, 10)])  # seq 3: 3 retweets 2's tweet 10
    w("tweets", [(12, 4, None)])  # seq 4: 4 is not followed
    w("unfollow", [(1, 3)])  # seq 5
    w("tweets", [(13, 2, None)])  # seq 6
    w("follow", [(1, 4)])  # seq 7
    an = Analysis(log, k=3)
    failures = []

    def expect(way, ids, want, t0=100.0, t1=100.0, lsn=None):
        got, _ = an.check(way, 1, t0, t1, ids, None if lsn is None else [lsn])
        if got != set(want):
            failures.append(f"{way} {ids}: flagged {sorted(got)}, want {sorted(want)}")

    # Consistent states.
    expect("release", [11, 10], [], lsn=30)
    expect("release", [10], [], lsn=20)
    expect("release", [13, 12, 10], [], lsn=70)
    expect("eventual", [13, 12, 10], [])
    expect("eventual", [11, 10], [], t0=3.5, t1=4.0)  # stale but consistent
    # The retweet without its original, while 1 follows 2 throughout.
    expect("eventual", [11], ["torn", "retweet"], t0=3.5, t1=4.0)
    expect("release", [11], ["mismatch", "torn", "retweet"], lsn=30)
    # Still showing 3's retweet after the unfollow was acknowledged.
    expect("eventual", [13, 11, 10], ["torn", "unfollow"], t0=6.5, t1=7.0)
    expect("release", [13, 11, 10], ["mismatch", "torn", "unfollow"], lsn=60)
    # 4's tweet before the follow of 4 was written.
    expect("eventual", [12, 11, 10], ["torn", "follow"], t0=4.5, t1=5.0)
    # After following 4 at seq 7 the release shows 12; without it, a
    # mismatch. 2's tweet 13 without 2's older tweet 10 is a partial follow.
    expect("release", [13, 10], ["mismatch", "torn"], lsn=70)
    expect("release", [13, 12], ["mismatch", "torn", "partial"], lsn=70)
    expect("postgres", [13, 12], ["torn", "partial"])
    expect("postgres", [13, 12, 10], [])
    # The same wrong answer read before the follow of 4 was sent.
    expect("eventual", [13, 12, 10], ["torn", "follow"], t0=6.5, t1=6.6)
    # A release read over SQL names no release: any of those current while
    # it ran will do, and only those.
    for ids, want in (([11, 10], set()), ([10], set()), ([13, 10], {"mismatch", "torn"})):
        got, _ = an.check("release-sql", 1, 3.0, 3.5, ids, [20, 30])
        if got != want:
            failures.append(f"release-sql {ids}: flagged {sorted(got)}, want {sorted(want)}")
    if failures:
        for f in failures:
            print(f"self-test: {f}", file=sys.stderr)
        return 1
    print("self-test: ok (the checks flag exactly the hand-made anomalies)")
    return 0


# --------------------------------------------------------------------------
# Servers' CPU time
# --------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        tail = f.read().rsplit(")", 1)[1].split()
    return int(tail[1]), [int(x) for x in tail[11:15]]  # ppid; utime stime cutime cstime


def process_tree_cpu(pid):
    """CPU seconds of a process, its reaped children and its live children."""
    if not pid:
        return 0.0
    try:
        _, (ut, st, cut, cst) = _stat(pid)
    except OSError:
        return 0.0
    total = ut + st + cut + cst
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid, (u, s, _, _) = _stat(name)
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            total += u + s
    return total / CLK_TCK


# --------------------------------------------------------------------------
# Readers (one process each)
# --------------------------------------------------------------------------


def reader_main(cfg, idx, probes, ready, go, times, out_path):
    """Reads every one of its users' timelines once (with cfg['prewarm']),
    says so on `ready`, waits for `go`, then reads timelines in a closed
    loop (or at cfg['rate'] reads/s) from times[0] to times[2], measuring
    from times[1], and pickles what it read to out_path."""
    way = cfg["way"]
    rng = random.Random(cfg["seed"] * 1000 + idx)
    mine = [(u, r) for u, r in cfg["read_ranks"] if u % cfg["readers"] == idx]
    law = Zipf(rng, [u for u, _ in mine], 0.62, ranks=[r for _, r in mine])
    client = conn = None
    if way == "release":
        client = FeedClient(
            "127.0.0.1",
            cfg["nginx_port"],
            cfg["interval_ms"],
            cfg["periods_ms"],
            cfg["origin_release"],
            k=K,
        )

        def read(u):
            release, rows = client.timeline(u)
            return release, tuple(row["id"] for row in rows)

    else:
        conn = psycopg.connect(**cfg["pg_conn" if way == "postgres" else "aq_conn"])
        if way == "eventual":
            conn.execute("SET aqueduct.consistency = 'eventual'")
        elif way == "release-sql":
            conn.execute("SET aqueduct.consistency = 'release'")

        def read(u):
            rows = conn.execute(TIMELINE_SQL, (u,), prepare=True).fetchall()
            return None, tuple(r[0] for r in rows)

    # Every user's first read: the client's bootstrap (the release way), the
    # automatic view's key filled (eventual), the buffer cache (postgres).
    errors = []
    t_pre, requests_pre = time.time(), 0
    if cfg["prewarm"]:
        for u, _ in mine:
            try:
                read(u)
            except Exception as e:  # noqa: BLE001 (counted and reported)
                errors.append(f"prewarm: {type(e).__name__}: {e}")
        if client is not None:
            requests_pre = client.stats()["requests"]
    ready.put((idx, len(mine), time.time() - t_pre, requests_pre))
    if not go.wait(900):
        return
    cfg = dict(cfg, start=times[0], begin=times[1], end=times[2])
    # Every read counts and shows which tweets it saw first; a sample of the
    # reads (and every read right after a write that concerns the user) is
    # kept whole for the checks: a reservoir of cfg["sample"] reads.
    kept, probed = [], []
    first_seen = {}  # tweet id -> end of the first read that showed it
    n_reads = nonempty = candidates = 0
    cap = cfg["sample"]
    gap = 1.0 / cfg["rate"] if cfg["rate"] else 0.0
    due = cfg["start"]
    late = 0  # times the reader fell a second behind the offered rate
    while time.time() < cfg["start"]:
        time.sleep(0.005)
    cpu0 = None
    while True:
        now = time.time()
        if now >= cfg["end"]:
            break
        if cpu0 is None and now >= cfg["begin"]:
            cpu0 = os.times()
            if client is not None:
                stats0 = client.stats()
        if gap:
            due += gap
            wait = due - now
            if wait > 0:
                time.sleep(wait)
            elif wait < -1.0:
                due = now
                late += 1
        probe = False
        try:
            u, _ = probes.get_nowait()
            probe = True
        except queue.Empty:
            u = law.pick()
        t0 = time.time()
        try:
            release, ids = read(u)
        except Exception as e:  # noqa: BLE001 (counted and reported)
            errors.append(f"{type(e).__name__}: {e}")
            if len(errors) > 50:
                break
            time.sleep(0.01)
            continue
        t1 = time.time()
        if t0 < cfg["begin"]:
            continue
        n_reads += 1
        if ids:
            nonempty += 1
        for tid in ids:
            if tid not in first_seen:
                first_seen[tid] = t1
        rec = (u, t0, t1, release, ids, probe)
        if probe:
            probed.append(rec)
        elif len(kept) < cap:
            kept.append(rec)
            candidates += 1
        else:
            candidates += 1
            j = rng.randrange(candidates)
            if j < cap:
                kept[j] = rec
    cpu1 = os.times()
    if cpu0 is None:
        cpu0 = cpu1
    out = {
        "reads": kept + probed,
        "n_reads": n_reads,
        "n_probes": len(probed),
        "nonempty": nonempty,
        "late": late,
        "first_seen": first_seen,
        "errors": errors,
        "cpu": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
    }
    if client is not None:
        st = client.stats()
        if cpu0 is cpu1:
            stats0 = st
        out["client"] = {
            key: (
                {c: st[key].get(c, 0) - stats0[key].get(c, 0) for c in st[key]}
                if isinstance(st[key], dict)
                else st[key] - stats0[key]
            )
            for key in st
        }
        client.close()
    if conn is not None:
        conn.close()
    with open(out_path, "wb") as f:
        pickle.dump(out, f)


# --------------------------------------------------------------------------
# The writer
# --------------------------------------------------------------------------


class World:
    """The current state, as the writer made it (for choosing writes)."""

    def __init__(self):
        self.followees = defaultdict(set)
        self.followers = defaultdict(set)
        self.tweets_by = defaultdict(list)
        self.unfollowed = defaultdict(list)  # follower -> authors it dropped
        self.next_tweet = 1

    def timeline(self, u):
        cand = []
        for a in self.followees[u]:
            cand.extend(self.tweets_by[a][-K:])
        return heapq.nlargest(K, cand)


class Writer:
    def __init__(self, args, wl, log, aq, pg):
        self.args, self.wl, self.log, self.aq, self.pg = args, wl, log, aq, pg
        self.rng = random.Random(args.seed + 7)
        self.world = World()
        self.tweet_author = {}
        self.probes = None  # list of queues while a phase runs
        self.stop = threading.Event()
        self.thread = None
        self.counts = Counter()
        self.error = None

    # --- applying one write to both databases -----------------------------------

    def _lsn(self):
        v = self.aq.info.parameter_status("aqueduct.last_lsn")
        if v is None:
            v = self.aq.execute("SHOW aqueduct.last_lsn").fetchone()[0]
        return int(v)

    def write(self, kind, payload, sql, params):
        aq_sent = time.time()
        self.aq.execute(sql, params)
        aq_ack = time.time()
        lsn = self._lsn()
        pg_sent = time.time()
        self.pg.execute(sql, params)
        pg_ack = time.time()
        self.log.append(kind, payload, lsn, aq_sent, aq_ack, pg_sent, pg_ack)
        w = self.world
        if kind == "tweets":
            for tid, author, _ in payload:
                w.tweets_by[author].append(tid)
                self.tweet_author[tid] = author
        elif kind == "follow":
            for f, a in payload:
                w.followees[f].add(a)
                w.followers[a].add(f)
        elif kind == "unfollow":
            for f, a in payload:
                w.followees[f].discard(a)
                w.followers[a].discard(f)
                w.unfollowed[f].append(a)
        return aq_ack

    def insert_many(self, kind, table, cols, rows, payload_of, chunk=500):
        for i in range(0, len(rows), chunk):
            part = rows[i : i + chunk]
            ph = ", ".join(["(" + ", ".join(["%s"] * len(cols)) + ")"] * len(part))
            sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES {ph}"
            self.write(kind, payload_of(part), sql, [v for r in part for v in r])

    # --- the initial data ----------------------------------------------------------

    def load(self):
        a, wl, rng = self.args, self.wl, self.rng
        self.insert_many("users", "users", ("id", "name"), [(u, f"user{u}") for u in wl.users], lambda p: None)
        self.insert_many("follow", "follows", ("follower", "followee"), wl.edges, lambda p: list(p))
        rows = []
        for _ in range(round(len(wl.producers) * a.history)):
            tid = self.world.next_tweet
            self.world.next_tweet += 1
            rows.append((tid, wl.tweet_law.pick(), body_text(rng), None))
        self.insert_many("tweets", "tweets", ("id", "author", "body", "retweet_of"), rows,
                         lambda p: [(r[0], r[1], r[3]) for r in p])

    # --- the running workload ------------------------------------------------------

    def probe(self, users, t_ack):
        qs = self.probes
        if not qs:
            return
        for u in users:
            try:
                qs[u % len(qs)].put_nowait((u, t_ack))
            except queue.Full:
                pass

    def tweet(self):
        wl, w, rng = self.wl, self.world, self.rng
        author = wl.tweet_law.pick()
        retweet_of = None
        if rng.random() < self.args.retweets:
            # One retweets what one's own timeline shows.
            seen = [t for t in w.timeline(author) if self.tweet_author[t] != author]
            if seen:
                retweet_of = rng.choice(seen)
        tid = w.next_tweet
        w.next_tweet += 1
        t_ack = self.write(
            "tweets",
            [(tid, author, retweet_of)],
            "INSERT INTO tweets (id, author, body, retweet_of) VALUES (%s, %s, %s, %s)",
            (tid, author, body_text(rng), retweet_of),
        )
        self.counts["retweet" if retweet_of else "tweet"] += 1
        if retweet_of is not None:
            # Those who follow both see (or must not see) the pair.
            both = w.followers[author] & w.followers[self.tweet_author[retweet_of]]
            self.probe(sorted(both)[:5], t_ack)

    def follow(self):
        wl, w, rng = self.wl, self.world, self.rng
        for _ in range(20):
            u = wl.followee_law.pick()
            if w.unfollowed[u] and rng.random() < 0.5:
                a = rng.choice(w.unfollowed[u])  # follow again
            else:
                a = wl.follower_law.pick()
            if a != u and a not in w.followees[u]:
                break
        else:
            return
        t_ack = self.write(
            "follow", [(u, a)], "INSERT INTO follows (follower, followee) VALUES (%s, %s)", (u, a)
        )
        self.counts["follow"] += 1
        self.probe([u], t_ack)

    def unfollow(self):
        wl, w, rng = self.wl, self.world, self.rng
        for _ in range(20):
            u = wl.read_law.pick()  # readers who read often, so it is seen
            if w.followees[u]:
                break
        else:
            return
        shown = [self.tweet_author[t] for t in w.timeline(u)]
        a = rng.choice(shown) if shown else rng.choice(sorted(w.followees[u]))
        t_ack = self.write(
            "unfollow", [(u, a)], "DELETE FROM follows WHERE follower = %s AND followee = %s", (u, a)
        )
        self.counts["unfollow"] += 1
        self.probe([u], t_ack)

    def run(self):
        a = self.args
        start = time.time()
        i = 0
        try:
            while not self.stop.is_set():
                due = start + i / a.write_rate
                wait = due - time.time()
                if wait > 0 and self.stop.wait(wait):
                    break
                x = self.rng.random()
                if x < a.follow_share:
                    self.follow()
                elif x < 2 * a.follow_share:
                    self.unfollow()
                else:
                    self.tweet()
                i += 1
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            self.error = f"{type(e).__name__}: {e}"

    def start(self):
        self.thread = threading.Thread(target=self.run, name="writer", daemon=True)
        self.thread.start()

    def finish(self):
        self.stop.set()
        self.thread.join(30)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def http_json(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null"), dict(r.headers)
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            data = json.loads(body)
        except ValueError:
            data = body.decode(errors="replace")
        return e.code, data, dict(e.headers)


def sql_statements(path):
    with open(path, encoding="utf-8") as f:
        lines = [ln for ln in f.read().splitlines() if not ln.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


class Run:
    def __init__(self, args):
        self.args = args
        self.aq_http = f"http://127.0.0.1:{args.aq_http_port}"
        self.interval = args.release_interval_ms
        self.grans = [self.interval * g for g in PERIOD_STEPS]
        self.problems = []  # what fails the run under --check
        common = dict(host="127.0.0.1", autocommit=True, connect_timeout=10)
        self.aq_conn = dict(port=args.aq_port, user="aqueduct", dbname="aqueduct", **common)
        self.pg_conn = dict(port=args.pg_port, user=args.pg_user, dbname=args.pg_database, **common)

    def say(self, *parts):
        if not self.args.quiet:
            print(*parts, flush=True)

    def problem(self, text):
        self.problems.append(text)
        print(f"PROBLEM: {text}", file=sys.stderr, flush=True)

    # --- setup ------------------------------------------------------------------

    def connect(self):
        self.aq = psycopg.connect(**self.aq_conn)
        self.pg = psycopg.connect(**self.pg_conn)
        self.aq_version = self.aq.execute("SELECT version()").fetchone()[0]
        self.pg_version = self.pg.execute("SHOW server_version").fetchone()[0]

    def create(self):
        aq, pg = self.aq, self.pg
        for name, _, _ in TIME_MAPS:
            try:
                aq.execute(f"DROP TIME MAP {name}")
            except psycopg.Error:
                pass
        for db in (aq, pg):
            for t in ("tweets", "follows", "users"):
                db.execute(f"DROP TABLE IF EXISTS {t}")
            for st in sql_statements(os.path.join(HERE, "schema.sql")):
                db.execute(st)
        self.origin = None
        if not set(RELEASE_WAYS) & set(self.args.ways):
            self.say("created the tables (schema.sql) in both")
            return
        every = ", ".join(f"'{duration_text(g)}'" for g in self.grans)
        for name, table, col in TIME_MAPS:
            aq.execute(f"CREATE TIME MAP {name} ON {table} ({col}) EVERY {every}")
        self.say(f"created the tables (schema.sql) in both, and the time maps (every {every}) in Aqueduct")
        status, cur, _ = http_json(f"{self.aq_http}/v1/releases/current")
        if status != 200:
            raise SystemExit(f"GET /v1/releases/current: HTTP {status} {cur} (is --release-interval set?)")
        if cur.get("interval_ms") != self.interval:
            raise SystemExit(f"the server releases every {cur.get('interval_ms')} ms, not {self.interval}")
        # Everything this run writes comes after this release.
        self.origin = cur["id"]

    # --- phases --------------------------------------------------------------------

    def cpu_now(self):
        a = self.args
        return {
            "aqueduct": process_tree_cpu(a.aq_pid),
            "postgres": process_tree_cpu(a.pg_pid),
            "nginx": process_tree_cpu(a.nginx_pid),
        }

    def nginx_counts(self, t_lo, t_hi):
        counts = Counter()
        if not self.args.nginx_log:
            return counts
        with open(self.args.nginx_log, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                try:
                    t = float(parts[0])
                except ValueError:
                    continue
                if t_lo <= t <= t_hi:
                    counts[parts[1]] += 1
        return counts

    def phase(self, way, rate, writer):
        a = self.args
        ctx = multiprocessing.get_context("spawn")
        probes = [ctx.Queue(maxsize=1000) for _ in range(a.readers)]
        ready, go, times = ctx.Queue(), ctx.Event(), ctx.Array("d", 3)
        # A release-mode SQL read is evaluated once per release and user:
        # nothing to warm (and reading every user takes long).
        prewarm = a.prewarm and way != "release-sql"
        cfg = {
            "way": way,
            "rate": rate / a.readers,
            # The same users in the same order in every way (probes aside).
            "seed": a.seed,
            "prewarm": prewarm,
            "readers": a.readers,
            "read_ranks": sorted(self.wl.read_law.ranks.items()),
            "pg_conn": self.pg_conn,
            "aq_conn": self.aq_conn,
            "nginx_port": a.nginx_port,
            "interval_ms": self.interval,
            "periods_ms": self.grans,
            "origin_release": self.origin,
            "sample": a.sample_reads,
        }
        outs = [os.path.join(a.work, f"reads-{way}-{i}.pickle") for i in range(a.readers)]
        procs = [
            ctx.Process(target=reader_main, args=(cfg, i, probes[i], ready, go, times, outs[i]))
            for i in range(a.readers)
        ]
        t_pre = time.time()
        for p in procs:
            p.start()
        load = f"{rate:g} reads/s offered" if rate else "closed loop"
        self.say(
            f"{way}: {a.readers} readers, {load}"
            + (", each user read once first" if prewarm else "")
            + f", then {a.warmup:g} s warm-up + {a.seconds:g} s"
        )
        warmed = []
        while len(warmed) < a.readers:
            try:
                warmed.append(ready.get(timeout=1.0))
            except queue.Empty:
                if not all(p.is_alive() for p in procs) or time.time() > t_pre + a.prewarm_timeout:
                    go.set()
                    for p in procs:
                        p.kill()
                        p.join()
                    raise SystemExit(f"{way}: the readers did not get ready (prewarm) in time")
        prewarm_s = time.time() - t_pre
        if prewarm:
            self.say(
                f"  every user read once in {prewarm_s:.1f} s"
                + (f" ({sum(w[3] for w in warmed)} HTTP requests)" if way == "release" else "")
            )
        start = time.time() + 0.2
        begin = start + a.warmup
        end = begin + a.seconds
        times[0], times[1], times[2] = start, begin, end
        go.set()
        time.sleep(max(0.0, start - time.time()))
        writer.probes = probes
        time.sleep(max(0.0, begin - time.time()))
        cpu0, t_begin = self.cpu_now(), time.time()
        time.sleep(max(0.0, end - time.time()))
        writer.probes = None
        for p in procs:
            p.join(max(5.0, a.seconds))
        cpu1, t_end = self.cpu_now(), time.time()
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
                self.problem(f"{way}: a reader did not finish in time")
        reads, errors, client_cpu, client = [], [], 0.0, Counter()
        n_reads = n_probes = nonempty = late = 0
        first_seen = {}
        for i, path in enumerate(outs):
            if not os.path.exists(path):
                self.problem(f"{way}: reader {i} left no results (exit code {procs[i].exitcode})")
                continue
            with open(path, "rb") as f:
                out = pickle.load(f)
            os.unlink(path)
            reads.extend(out["reads"])
            n_reads += out["n_reads"]
            n_probes += out["n_probes"]
            nonempty += out["nonempty"]
            late += out["late"]
            for tid, t in out["first_seen"].items():
                if t < first_seen.get(tid, float("inf")):
                    first_seen[tid] = t
            errors.extend(out["errors"])
            client_cpu += out["cpu"]
            for key, v in out.get("client", {}).items():
                if isinstance(v, dict):
                    for c, n in v.items():
                        client[f"{key}:{c}"] += n
                else:
                    client[key] += v
        reads.sort(key=lambda r: r[1])
        for q in probes:
            q.cancel_join_thread()
        return {
            "way": way,
            "rate": rate,
            "prewarm": {"users": sum(w[1] for w in warmed), "seconds": prewarm_s,
                        "http_requests": sum(w[3] for w in warmed)} if prewarm else None,
            "reads": reads,
            "n_reads": n_reads,
            "n_probes": n_probes,
            "nonempty": nonempty,
            "late": late,
            "first_seen": first_seen,
            "errors": errors,
            "seconds": a.seconds,
            "t_begin": begin,
            "t_end": end,
            "cpu": {k: cpu1[k] - cpu0[k] for k in cpu0},
            "cpu_window": t_end - t_begin,
            "client_cpu": client_cpu,
            "client": dict(client),
            "nginx": self.nginx_counts(begin, t_end + 1) if way == "release" else Counter(),
        }

    @staticmethod
    def net_cpu(results):
        """Server CPU per read net of the writes: a server's CPU rate while it
        served no reads (the writer writes throughout, at the same rate) is
        taken off its CPU during each phase in which it served reads."""
        base = {}
        for srv in ("aqueduct", "postgres", "nginx"):
            idle = [r["server_cpu_s"][srv] / r["cpu_window_s"] for r in results if srv not in SERVERS_OF[r["way"]]]
            base[srv] = min(idle) if idle else None
        for r in results:
            servers = SERVERS_OF[r["way"]]
            if r["reads"] and all(base[s] is not None for s in servers):
                net = sum(r["server_cpu_s"][s] - base[s] * r["cpu_window_s"] for s in servers)
                r["server_cpu_us_per_read_net"] = 1e6 * net / r["reads"]
            else:
                r["server_cpu_us_per_read_net"] = None
            r["writes_only_cpu_share"] = {s: base[s] for s in servers}

    def releases_of(self, way, t0, t1, release):
        """The releases a release read may have read: the one it names, or
        for SQL (which does not say) any current during the read."""
        if release is not None:
            return [release]
        due = lambda t: int(t * 1000) // self.interval  # noqa: E731
        return list(range(due(t0) - 1, due(t1) + 1))

    def release_lsns(self, releases):
        out = {}
        for r in sorted(releases):
            status, data, _ = http_json(f"{self.aq_http}/v1/releases/{r}")
            if status != 200:
                self.problem(f"GET /v1/releases/{r}: HTTP {status} {data}")
                continue
            out[r] = data["lsn"]
        return out

    # --- the end: every way must converge on the final state ---------------------------

    def converge(self, analysis):
        a = self.args
        final = len(self.log)
        last_lsn = self.log.aq_lsn[-1]
        users = self.wl.users
        if a.converge_users and len(users) > a.converge_users:
            users = sorted(random.Random(a.seed).sample(users, a.converge_users))
        want = {u: analysis.oracle(u, final) for u in users}
        result = {"users": len(users)}
        releases = self.origin is not None
        deadline = time.time() + 15
        # Wait until a release includes the last write.
        while releases:
            status, cur, _ = http_json(f"{self.aq_http}/v1/releases/current")
            if status == 200 and cur["lsn"] >= last_lsn:
                break
            if time.time() > deadline:
                self.problem(f"no release reached LSN {last_lsn} in time (current: {cur})")
                break
            time.sleep(0.05)

        def sql_way(conn, setting, users=users):
            if setting:
                conn.execute(f"SET aqueduct.consistency = '{setting}'")
            bad = [u for u in users if [r[0] for r in conn.execute(TIMELINE_SQL, (u,), prepare=True)] != want[u]]
            return bad

        pg_bad = sql_way(self.pg, None)
        aq = psycopg.connect(**self.aq_conn)
        ev_bad = sql_way(aq, "eventual")
        while ev_bad and time.time() < deadline:
            time.sleep(0.1)
            ev_bad = [
                u for u in ev_bad if [r[0] for r in aq.execute(TIMELINE_SQL, (u,), prepare=True)] != want[u]
            ]
        rel_bad, cl_bad, sample = [], [], []
        if releases:
            # A release-mode SQL read of the join is evaluated over the
            # whole snapshot, once per user: a sample of them.
            sample = users[:: max(1, len(users) // 25)]
            rel_bad = sql_way(aq, "release", sample)
            result["release SQL users"] = len(sample)
            client = FeedClient("127.0.0.1", a.nginx_port, self.interval, self.grans, self.origin, k=K)
            for u in users:
                _, rows = client.timeline(u)
                if [row["id"] for row in rows] != want[u]:
                    cl_bad.append(u)
            client.close()
        aq.close()
        for name, bad, n in (
            ("postgres", pg_bad, len(users)),
            ("eventual (Aqueduct, after the writes stopped)", ev_bad, len(users)),
            ("SQL with aqueduct.consistency = 'release'", rel_bad, len(sample)),
            ("feedclient (fresh state, through nginx)", cl_bad, len(users)),
        ):
            result[name] = len(bad)
            if bad:
                u = bad[0]
                self.problem(
                    f"final state: {len(bad)} of {n} timelines differ from the log via {name} "
                    f"(first: user {u}, want {want[u][:5]}...)"
                )
        if not (pg_bad or ev_bad or rel_bad or cl_bad):
            self.say(
                f"final state: {len(users)} timelines agree with the log via PostgreSQL, Aqueduct eventual"
                + (", Aqueduct release SQL and feedclient through nginx" if releases else "")
            )
        return result

    # --- analysis ------------------------------------------------------------------

    def analyse(self, ph, analysis, lsns):
        way, reads = ph["way"], ph["reads"]
        log = self.log
        flags = Counter()
        examples = defaultdict(list)
        first_seen = ph["first_seen"]
        ages = []
        for u, t0, t1, release, ids, probe in reads:
            cands = None
            if way in RELEASE_WAYS:
                cands = [lsns.get(r) for r in self.releases_of(way, t0, t1, release)]
                if None in cands:
                    flags["no release"] += 1
                    continue
            got, _ = analysis.check(way, u, t0, t1, ids, cands)
            for f in got:
                flags[f] += 1
                if len(examples[f]) < 3:
                    examples[f].append({"user": u, "release": release, "ids": list(ids)[:6]})
            if way == "release":
                ages.append(t1 - release * self.interval / 1000)
        ack = log.pg_ack if way == "postgres" else log.aq_ack
        stale = []
        unseen = 0
        for tid, (_, _, seq) in log.tweet.items():
            t_commit = ack[seq - 1]
            if not (ph["t_begin"] <= t_commit <= ph["t_end"] - 2.0):
                continue
            if tid in first_seen:
                stale.append(first_seen[tid] - t_commit)
            else:
                unseen += 1
        stale.sort()
        ages.sort()
        n = ph["n_reads"]
        cpu = ph["cpu"]
        server = SERVERS_OF[way]
        server_cpu = sum(cpu[s] for s in server)
        res = {
            "way": way,
            "title": WAY_TITLES[way],
            "offered_reads_per_s": ph["rate"] or None,
            "reads": n,
            "reads_per_s": n / ph["seconds"],
            "probe_reads": ph["n_probes"],
            "checked_reads": len(reads),
            "prewarm": ph["prewarm"],
            "fell_behind": ph["late"],
            "nonempty_reads": ph["nonempty"],
            "errors": len(ph["errors"]),
            "error_samples": ph["errors"][:3],
            "server_cpu_s": {s: round(cpu[s], 3) for s in cpu},
            "cpu_window_s": ph["cpu_window"],
            "server_cpu_us_per_read": 1e6 * server_cpu / n if n else None,
            "client_cpu_us_per_read": 1e6 * ph["client_cpu"] / n if n else None,
            "anomalies": {f: flags.get(f, 0) for f in ANOMALIES},
            "anomaly_examples": dict(examples),
            "staleness_s": {
                "tweets": len(stale) + unseen,
                "seen": len(stale),
                "p50": percentile(stale, 50),
                "p90": percentile(stale, 90),
                "p99": percentile(stale, 99),
                "max": stale[-1] if stale else None,
            },
        }
        if way in RELEASE_WAYS:
            res["mismatches"] = flags.get("mismatch", 0)
            res["reads_without_release"] = flags.get("no release", 0)
        if way == "release":
            res["snapshot_age_s"] = {"p50": percentile(ages, 50), "p99": percentile(ages, 99)}
            c = ph["client"]
            res["client"] = c
            res["http_requests_per_read"] = c.get("requests", 0) / n if n else None
            res["reads_without_requests"] = c.get("reads_without_requests", 0)
            # Reads that had to bring the user's state up to a newer release.
            syncing = c.get("reads", 0) - c.get("reads_without_requests", 0)
            res["syncing_reads"] = syncing
            res["http_requests_per_syncing_read"] = c.get("requests", 0) / syncing if syncing else None
            ng = ph["nginx"]
            total = sum(ng.values())
            res["nginx"] = dict(ng)
            res["nginx_requests"] = total
            res["cache_hit_rate"] = ng.get("HIT", 0) / total if total else None
            res["origin_requests_per_read"] = (total - ng.get("HIT", 0)) / n if n else None
            res["releases_read"] = len({r[3] for r in reads})
        return res

    # --- everything --------------------------------------------------------------------

    def run(self):
        a = self.args
        self.connect()
        self.say(f"Aqueduct: {self.aq_version.splitlines()[0]}; PostgreSQL {self.pg_version}")
        self.create()
        self.wl = Workload(a)
        self.log = Log()
        writer = Writer(a, self.wl, self.log, self.aq, self.pg)
        t0 = time.time()
        writer.load()
        self.say(
            f"loaded {len(self.wl.users)} users ({len(self.wl.producers)} producers), "
            f"{len(self.wl.edges)} follows, {writer.world.next_tweet - 1} tweets into both "
            f"in {time.time() - t0:.1f} s (origin release {self.origin})"
        )
        self.pg.execute("ANALYZE")
        plan = self.aq.execute("EXPLAIN " + TIMELINE_SQL.replace("%s", "1")).fetchall()
        self.aq_plan = plan[0][0] if plan else ""
        self.say(f"Aqueduct's plan for the timeline query: {self.aq_plan[:160]}")
        writer.start()
        phases = []
        for way, rate in a.phases:
            ph = self.phase(way, rate, writer)
            phases.append(ph)
            if ph["errors"]:
                self.problem(f"{way}: {len(ph['errors'])} reads failed, e.g. {ph['errors'][0]}")
            if writer.error:
                break
        writer.finish()
        if writer.error:
            self.problem(f"the writer failed: {writer.error}")
            return self.finish([], None, writer)
        self.say(
            f"writer: {len(self.log)} writes in all ("
            + ", ".join(f"{n} {k}s" for k, n in sorted(writer.counts.items()))
            + " during the phases)"
        )
        t_an = time.time()
        analysis = Analysis(self.log)
        releases = {
            r for ph in phases if ph["way"] in RELEASE_WAYS for rd in ph["reads"]
            for r in self.releases_of(ph["way"], rd[1], rd[2], rd[3])
        }
        lsns = self.release_lsns(releases)
        results = [self.analyse(ph, analysis, lsns) for ph in phases]
        self.net_cpu(results)
        self.say(f"checked {sum(r['checked_reads'] for r in results)} reads in {time.time() - t_an:.1f} s")
        t_cv = time.time()
        convergence = self.converge(analysis)
        self.say(f"final-state checks took {time.time() - t_cv:.1f} s")
        return self.finish(results, convergence, writer)

    def finish(self, results, convergence, writer):
        a = self.args
        for r in results:
            way, an = r["way"], r["anomalies"]
            if r["reads"] == 0:
                self.problem(f"{way}: no reads completed")
            if way in RELEASE_WAYS:
                if r["mismatches"] or any(an.values()) or r["reads_without_release"]:
                    self.problem(
                        f"{way}: {r['mismatches']} reads differ from the log as of their release; "
                        f"anomalies {an}; examples {r['anomaly_examples']}"
                    )
                if r["nonempty_reads"] == 0:
                    self.problem(f"{way}: every timeline read was empty")
            if way == "postgres" and any(an.values()):
                self.problem(f"postgres: the checks flag PostgreSQL's answers: {an} {r['anomaly_examples']}")
        self.print_table(results)
        if a.json:
            doc = {
                "benchmark": "feed",
                "machine": machine(),
                "versions": {"aqueduct": self.aq_version.splitlines()[0], "postgres": self.pg_version,
                             "nginx": nginx_version(a.nginx_port), "python": platform.python_version(),
                             "psycopg": psycopg.__version__},
                "label": a.label,
                "config": {
                    "users": a.users, "producers": len(self.wl.producers), "follows": len(self.wl.edges),
                    "history_tweets_per_producer": a.history, "seconds_per_way": a.seconds,
                    "warmup_s": a.warmup, "readers": a.readers, "write_rate_per_s": a.write_rate,
                    "follow_share": a.follow_share, "unfollow_share": a.follow_share,
                    "retweet_share_of_tweets": a.retweets, "release_interval_ms": self.interval,
                    "time_map_periods": [duration_text(g) for g in self.grans],
                    "timeline_length": K, "seed": a.seed,
                    "phases": [f"{w}@{r:g}" if r else w for w, r in a.phases],
                    "zipf": {"followers_per_producer": 0.39, "followees_per_consumer": 0.62,
                             "tweets_per_producer": 0.57, "reads_per_consumer": 0.62},
                },
                "aqueduct_plan": self.aq_plan,
                "writes": dict(writer.counts),
                "results": results,
                "convergence": convergence,
                "problems": self.problems,
            }
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, default=lambda o: dict(o) if isinstance(o, Counter) else str(o))
                f.write("\n")
            self.say(f"wrote {a.json}")
        if a.check and self.problems:
            print(f"feed: FAILED ({len(self.problems)} problems)", flush=True)
            return 1
        print("feed: ok" + (" (every check passed)" if a.check else ""), flush=True)
        return 0

    def print_table(self, results):
        if not results:
            return

        def ms(x):
            return "–" if x is None else f"{x * 1000:.0f}"

        def num(x, fmt="{:.0f}"):
            return "–" if x is None else fmt.format(x)

        print()
        print(
            "| way | load | reads/s | server CPU µs/read (net of writes) | client CPU µs/read | HTTP requests/read "
            "| nginx hit rate | staleness p50 / p99 / max (ms) | torn | retweet | unfollow | follow | partial |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in results:
            st, an = r["staleness_s"], r["anomalies"]
            hit = r.get("cache_hit_rate")
            load = f"{r['offered_reads_per_s']:g}/s" if r["offered_reads_per_s"] else "closed"
            print(
                f"| {r['title']} | {load} | {r['reads_per_s']:.0f} | {num(r['server_cpu_us_per_read'])} "
                f"({num(r['server_cpu_us_per_read_net'])}) "
                f"| {num(r['client_cpu_us_per_read'])} | {num(r.get('http_requests_per_read'), '{:.2f}')} "
                f"| {'–' if hit is None else f'{hit:.1%}'} "
                f"| {ms(st['p50'])} / {ms(st['p99'])} / {ms(st['max'])} "
                f"| {an['torn']} | {an['retweet']} | {an['unfollow']} | {an['follow']} | {an['partial']} |"
            )
        print()
        for r in results:
            extra = ""
            if r["way"] in RELEASE_WAYS:
                extra = f"; {r['mismatches']} reads differ from the log as of their release"
            if r["way"] == "release":
                extra += (
                    f"; {r['syncing_reads']} reads brought a user to a newer release, with "
                    f"{num(r['http_requests_per_syncing_read'], '{:.2f}')} HTTP requests each "
                    f"(the others needed none); {num(r['origin_requests_per_read'], '{:.3f}')} requests "
                    f"per read reached Aqueduct; nginx: {r['nginx']}; snapshot age at read p50 "
                    f"{ms(r['snapshot_age_s']['p50'])} ms"
                )
            if r["fell_behind"]:
                extra += f"; the readers fell behind the offered load {r['fell_behind']} times"
            print(
                f"{r['way']}: {r['reads']} reads ({r['probe_reads']} right after a write that concerns the user, "
                f"{r['nonempty_reads']} non-empty, {r['checked_reads']} checked), "
                f"{r['staleness_s']['seen']} of {r['staleness_s']['tweets']} "
                f"new tweets seen; server CPU s {r['server_cpu_s']}{extra}"
            )
        print(flush=True)


def machine():
    out = {"cores": os.cpu_count(), "kernel": platform.release(), "os": platform.system()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    out["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            out["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return out


def nginx_version(port):
    try:
        _, _, headers = http_json(f"http://127.0.0.1:{port}/v1/releases/current", timeout=5)
        return headers.get("Server")
    except OSError:
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--aq-port", type=int, default=5433, help="Aqueduct's PostgreSQL port")
    p.add_argument("--aq-http-port", type=int, default=8433, help="Aqueduct's HTTP port")
    p.add_argument("--pg-port", type=int, default=5432, help="PostgreSQL's port")
    p.add_argument("--pg-user", default="postgres")
    p.add_argument("--pg-database", default="postgres")
    p.add_argument("--nginx-port", type=int, default=8080, help="nginx (the cache in front of Aqueduct)")
    p.add_argument("--aq-pid", type=int, help="Aqueduct's process id (for its CPU time)")
    p.add_argument("--pg-pid", type=int, help="the postmaster's process id")
    p.add_argument("--nginx-pid", type=int, help="nginx's master process id")
    p.add_argument("--nginx-log", help="nginx's access log ($msec $upstream_cache_status ...)")
    p.add_argument("--release-interval-ms", type=int, default=1000)
    p.add_argument("--users", type=int, default=2000)
    p.add_argument("--producer-share", type=float, default=0.35, help="share of users who tweet (Table 1: 0.35)")
    p.add_argument("--followees", type=float, default=4.63, help="follows per user on average (Table 1: 4.63)")
    p.add_argument("--history", type=float, default=10, help="tweets per producer written before the run")
    p.add_argument("--write-rate", type=float, default=20, help="writes per second during the run")
    p.add_argument("--follow-share", type=float, default=0.1, help="share of writes that follow (and as many unfollow)")
    p.add_argument("--retweets", type=float, default=0.3, help="share of tweets that are retweets")
    p.add_argument("--readers", type=int, default=2, help="reader processes per way")
    p.add_argument("--seconds", type=float, default=20, help="measured seconds per way")
    p.add_argument("--warmup", type=float, default=3, help="unmeasured seconds per way before that")
    p.add_argument(
        "--phases",
        dest="phases_text",
        default=",".join(WAYS),
        help="the phases, in order: WAY (readers in a closed loop) or WAY@RATE (RATE reads/s offered in all); "
        f"the ways: {', '.join(WAYS)}",
    )
    p.add_argument("--sample-reads", type=int, default=100000,
                   help="reads kept whole for the checks, per reader (a uniform sample; all reads right "
                   "after a write that concerns the user are kept too)")
    p.add_argument("--converge-users", type=int, default=0, help="check only this many users at the end (0: all)")
    p.add_argument("--no-prewarm", dest="prewarm", action="store_false",
                   help="do not read every user's timeline once before each phase")
    p.add_argument("--prewarm-timeout", type=float, default=600, help="seconds allowed for that")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check", action="store_true", help="fail on any problem (see the module doc)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--label", help="a label kept in the JSON (the commit, say)")
    p.add_argument("--work", help="a scratch directory for the readers' results")
    p.add_argument("--self-test", action="store_true", help="only check the checks, on a hand-made history")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args()
    if a.self_test:
        sys.exit(self_test())
    a.phases = []
    for item in a.phases_text.split(","):
        way, _, rate = item.strip().partition("@")
        if way not in WAYS:
            p.error(f"--phases: {item!r}: the way must be one of {', '.join(WAYS)}")
        try:
            a.phases.append((way, float(rate or 0)))
        except ValueError:
            p.error(f"--phases: {item!r}: the rate after @ must be a number")
    a.ways = sorted({w for w, _ in a.phases}, key=WAYS.index)
    if a.work is None:
        import tempfile

        a.work = tempfile.mkdtemp(prefix="feed-")
    try:
        sys.exit(Run(a).run())
    except psycopg.Error as e:
        print(f"feed: FAILED: {type(e).__name__} (SQLSTATE {e.sqlstate}): {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The news-aggregator example: data generator, walk-through and checker.

Creates the tables of schema.sql and the views of views.sql, loads users,
stories, votes and comments with a zipf-like skew (a few stories get most of
the votes, a few users write most of the stories), shows the views changing
as votes come and go, then runs a mixed workload: keyed reads of the views
and of the base tables (prepared statements) and writes (votes, unvotes,
stories, comments, title edits, removals, a transaction rolled back).

With --check it keeps its own model of the rows in memory and compares every
read, and after each batch of writes every full view, with what the model
says. Any difference is printed and the program exits with status 1.

    python3 news.py                          # walk-through against 127.0.0.1:5433
    python3 news.py --check --stories 2000   # and verify every answer
    python3 news.py --check --state s.json   # save the model at the end ...
    python3 news.py --check --resume --state s.json   # ... check it later

Connection: --host/--port (defaults: PGHOST/PGPORT, else 127.0.0.1:5433);
user, password and database from the usual libpq variables (PGUSER, ...).
Needs psycopg 3 (`pip install "psycopg[binary]"`).

The example owns the tables users, stories, votes, comments and the views
StoryWithVotes, Karma and FrontPage: without --resume it drops and recreates
them.
"""

import argparse
import bisect
import itertools
import json
import os
import random
import statistics
import sys
import time
import urllib.request
from collections import Counter

import psycopg
from psycopg.types.numeric import Int2, Int4, Int8

HERE = os.path.dirname(os.path.abspath(__file__))
FRONT_PAGE_SIZE = 10  # the LIMIT of FrontPage in views.sql
# In the order of views.sql (Karma reads StoryWithVotes): created in this
# order, dropped in the reverse one.
VIEWS = ("StoryWithVotes", "Karma", "FrontPage")
TABLES = ("users", "stories", "votes", "comments")
MAX_SHOWN = 20  # mismatches printed in full

WORDS = (
    "rust postgres dataflow incremental views log compaction latency "
    "caching sharding replica consensus raft paxos kernel scheduler "
    "compiler parser type system garbage collector allocator cache "
    "naïve café O'Reilly \"quoted\" 100% émigré ünïcödé"
).split()

# The reads. Keyed reads of a view (WHERE on the view's columns) are lookups
# in the view; the rest read the base tables directly. Parameters are plain
# Python ints: psycopg sends each as a smallint, integer or bigint by its
# value, and the server takes the type the client declares.
Q_STORY = "SELECT id, author, title, url, votes FROM StoryWithVotes WHERE id = %s"
Q_KARMA = "SELECT id, name, karma FROM Karma WHERE id = %s"
Q_FRONT = "SELECT id, title, votes, comments FROM FrontPage ORDER BY votes DESC, id DESC"
Q_COMMENTS = "SELECT id, author, body FROM comments WHERE story_id = %s ORDER BY id"
Q_VOTE_COUNT = "SELECT count(*) FROM votes WHERE story_id = %s"
# The Karma of one user written as a join: not a view, but Aqueduct answers a
# prepared join with parameters through an automatic view of its own, so this
# checks the views.sql view against a second, independently built dataflow.
Q_KARMA_JOIN = (
    "SELECT stories.author, count(*) FROM stories JOIN votes ON stories.id = votes.story_id "
    "WHERE stories.author = %s GROUP BY stories.author"
)


def sql_statements(path):
    """The statements of a .sql file (whole-line -- comments, ; at ends)."""
    with open(path, encoding="utf-8") as f:
        lines = [ln for ln in f.read().splitlines() if not ln.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


class Model:
    """The rows the tables should hold, and what the views should say about
    them, computed in plain Python: the oracle for --check."""

    def __init__(self):
        self.users = {}  # id -> name
        self.stories = {}  # id -> (author, title, url)
        self.voters = {}  # story id -> set of user ids who voted for it
        self.comments = {}  # id -> (story id, author, body)
        self.story_comments = {}  # story id -> set of comment ids
        self.authored = {}  # user id -> set of story ids
        self.next_user = self.next_story = self.next_comment = 1

    # --- changes (made after the database acknowledged them) ---------------

    def add_user(self, uid, name):
        self.users[uid] = name
        self.authored.setdefault(uid, set())
        self.next_user = max(self.next_user, uid + 1)

    def add_story(self, sid, author, title, url):
        self.stories[sid] = (author, title, url)
        self.voters[sid] = set()
        self.story_comments[sid] = set()
        self.authored.setdefault(author, set()).add(sid)
        self.next_story = max(self.next_story, sid + 1)

    def remove_story(self, sid):
        author = self.stories.pop(sid)[0]
        self.authored[author].discard(sid)
        for cid in self.story_comments.pop(sid):
            del self.comments[cid]
        return len(self.voters.pop(sid))

    def set_title(self, sid, title):
        author, _, url = self.stories[sid]
        self.stories[sid] = (author, title, url)

    def add_vote(self, sid, uid):
        """True if this is a new vote (False: the user had voted already)."""
        if uid in self.voters[sid]:
            return False
        self.voters[sid].add(uid)
        return True

    def remove_vote(self, sid, uid):
        self.voters[sid].remove(uid)

    def add_comment(self, cid, sid, author, body):
        self.comments[cid] = (sid, author, body)
        self.story_comments[sid].add(cid)
        self.next_comment = max(self.next_comment, cid + 1)

    # --- what the views must contain -----------------------------------------

    def story_row(self, sid):
        if sid not in self.stories:
            return None
        author, title, url = self.stories[sid]
        return (sid, author, title, url, len(self.voters[sid]))

    def karma_value(self, uid):
        return sum(len(self.voters[s]) for s in self.authored.get(uid, ()))

    def karma_row(self, uid):
        if uid not in self.users:
            return None
        return (uid, self.users[uid], self.karma_value(uid))

    def story_with_votes(self):
        return [self.story_row(s) for s in sorted(self.stories)]

    def karma(self):
        return [self.karma_row(u) for u in sorted(self.users)]

    def front_page(self):
        rows = [
            (sid, title, len(self.voters[sid]), len(self.story_comments[sid]))
            for sid, (_, title, _) in self.stories.items()
        ]
        rows.sort(key=lambda r: (-r[2], -r[0]))
        return rows[:FRONT_PAGE_SIZE]

    def comments_of(self, sid):
        return [(c, self.comments[c][1], self.comments[c][2]) for c in sorted(self.story_comments.get(sid, ()))]

    # --- the base tables -----------------------------------------------------

    def table_rows(self):
        return {
            "users": sorted(self.users.items()),
            "stories": sorted((s, a, t, u) for s, (a, t, u) in self.stories.items()),
            "votes": sorted((s, u) for s, us in self.voters.items() for u in us),
            "comments": sorted((c, s, a, b) for c, (s, a, b) in self.comments.items()),
        }

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.table_rows(), f)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
        m = cls()
        for uid, name in rows["users"]:
            m.add_user(uid, name)
        for sid, author, title, url in rows["stories"]:
            m.add_story(sid, author, title, url)
        for sid, uid in rows["votes"]:
            m.add_vote(sid, uid)
        for cid, sid, author, body in rows["comments"]:
            m.add_comment(cid, sid, author, body)
        return m


class Popularity:
    """Ids with zipf-like weights: the item of rank k is picked with weight
    1/k^s, so a few items get most of the picks."""

    def __init__(self, rng, s):
        self.rng, self.s = rng, s
        self.ids, self.weights, self.pos = [], [], {}
        self.cum = None

    def add(self, item, rank):
        self.pos[item] = len(self.ids)
        self.ids.append(item)
        self.weights.append(1.0 / rank**self.s)
        self.cum = None

    def add_new(self, item):
        """A new item, as popular as a random rank among the current ones."""
        self.add(item, self.rng.randint(1, max(1, len(self.ids))))

    def remove(self, item):
        i = self.pos.pop(item)
        last = len(self.ids) - 1
        if i != last:
            self.ids[i], self.weights[i] = self.ids[last], self.weights[last]
            self.pos[self.ids[i]] = i
        self.ids.pop()
        self.weights.pop()
        self.cum = None

    def pick(self):
        if self.cum is None:
            self.cum = list(itertools.accumulate(self.weights))
        x = self.rng.random() * self.cum[-1]
        return self.ids[min(bisect.bisect_right(self.cum, x), len(self.ids) - 1)]

    def __len__(self):
        return len(self.ids)


def rows_diff(got, want):
    """Rows only in `got` and only in `want` (as bags), for a short report."""
    g, w = Counter(got), Counter(want)
    return sorted((g - w).elements(), key=repr), sorted((w - g).elements(), key=repr)


class News:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        conninfo = dict(host=args.host, port=args.port, connect_timeout=10)
        # One connection writes, another reads: every read after a write was
        # acknowledged must see it, whichever connection it comes from.
        self.w = psycopg.connect(autocommit=True, **conninfo)
        self.r = psycopg.connect(autocommit=True, **conninfo)
        self.model = Model()
        self.story_pop = Popularity(self.rng, args.zipf)
        self.user_pop = Popularity(self.rng, args.zipf)
        self.checks = 0
        self.mismatches = 0
        self.touched_stories = set()
        self.touched_users = set()
        self.latency = {}  # kind -> list of seconds
        self.counts = {}  # operation -> how many

    # --- output and checking ---------------------------------------------------

    def say(self, *parts):
        if not self.args.quiet:
            print(*parts, flush=True)

    def compare(self, what, got, want):
        if not self.args.check:
            return
        self.checks += 1
        if got == want:
            return
        self.mismatches += 1
        if self.mismatches > MAX_SHOWN:
            return
        print(f"MISMATCH: {what}", file=sys.stderr)
        if isinstance(got, list) and isinstance(want, list) and (len(got) > 3 or len(want) > 3):
            extra, missing = rows_diff(got, want)
            print(f"  {len(got)} rows, want {len(want)}", file=sys.stderr)
            for r in extra[:10]:
                print(f"  unexpected: {r!r}", file=sys.stderr)
            for r in missing[:10]:
                print(f"  missing:    {r!r}", file=sys.stderr)
            if not extra and not missing:
                print("  same rows, different order", file=sys.stderr)
        else:
            print(f"  got:  {got!r}\n  want: {want!r}", file=sys.stderr)

    def timed(self, kind, conn, sql, params=None, prepare=True):
        t0 = time.perf_counter()
        cur = conn.execute(sql, params, prepare=prepare)
        rows = cur.fetchall() if cur.description is not None else None
        self.latency.setdefault(kind, []).append(time.perf_counter() - t0)
        return cur, rows

    def count(self, op):
        self.counts[op] = self.counts.get(op, 0) + 1

    # --- setup -------------------------------------------------------------------

    def reset(self):
        # Views first, Karma before the StoryWithVotes it reads: a table or
        # view that a view reads cannot be dropped. Automatic views made by
        # an earlier run against the server (the karma join) go with the
        # tables they read; this run's checks of the join would see any
        # that kept serving the old rows.
        for v in reversed(VIEWS):
            self.w.execute(f"DROP VIEW IF EXISTS {v}")
        for t in reversed(TABLES):
            self.w.execute(f"DROP TABLE IF EXISTS {t}")

    def create_schema(self):
        for st in sql_statements(os.path.join(HERE, "schema.sql")):
            self.w.execute(st)
        self.say(f"created the tables {', '.join(TABLES)} (schema.sql)")

    def create_views(self, which):
        for st in sql_statements(os.path.join(HERE, "views.sql")):
            name = st.split()[2]  # CREATE VIEW <name> AS ...
            if name in which:
                t0 = time.perf_counter()
                self.w.execute(st)
                self.say(f"created view {name} ({(time.perf_counter() - t0) * 1000:.0f} ms)")

    def title(self):
        n = self.rng.randint(2, 6)
        return " ".join(self.rng.choice(WORDS) for _ in range(n)).capitalize()

    def insert_many(self, table, cols, rows, chunk=500):
        for i in range(0, len(rows), chunk):
            part = rows[i : i + chunk]
            ph = ", ".join(["(" + ", ".join(["%s"] * len(cols)) + ")"] * len(part))
            self.w.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES {ph}",
                [v for r in part for v in r],
            )

    def load(self):
        a, m, rng = self.args, self.model, self.rng
        t0 = time.perf_counter()
        ranks = list(range(1, a.users + 1))
        rng.shuffle(ranks)
        users = []
        for uid, rank in zip(range(1, a.users + 1), ranks):
            users.append((uid, f"user{uid}"))
            self.user_pop.add(uid, rank)
        self.insert_many("users", ("id", "name"), users)
        for uid, name in users:
            m.add_user(uid, name)

        ranks = list(range(1, a.stories + 1))
        rng.shuffle(ranks)
        stories = []
        for sid, rank in zip(range(1, a.stories + 1), ranks):
            url = None if rng.random() < 0.2 else f"https://example.com/{sid}"
            stories.append((sid, self.user_pop.pick(), self.title(), url))
            self.story_pop.add(sid, rank)
        self.insert_many("stories", ("id", "author", "title", "url"), stories)
        for s in stories:
            m.add_story(*s)

        votes = set()
        for _ in range(a.votes * 20):
            if len(votes) >= a.votes:
                break
            votes.add((self.story_pop.pick(), self.user_pop.pick()))
        votes = sorted(votes)
        self.insert_many("votes", ("story_id", "user_id"), votes)
        for sid, uid in votes:
            m.add_vote(sid, uid)

        comments = []
        for cid in range(1, a.comments + 1):
            comments.append((cid, self.story_pop.pick(), self.user_pop.pick(), self.title().lower()))
        self.insert_many("comments", ("id", "story_id", "author", "body"), comments)
        for c in comments:
            m.add_comment(*c)
        took = time.perf_counter() - t0
        n = len(users) + len(stories) + len(votes) + len(comments)
        self.say(
            f"loaded {len(users)} users, {len(stories)} stories, {len(votes)} votes, "
            f"{len(comments)} comments ({n} rows in {took:.2f} s, {n / took:.0f} rows/s)"
        )

    def resume(self):
        """Carries on from a saved model (--resume): the popularity ranks are
        drawn afresh."""
        self.model = m = Model.load(self.args.state)
        for pop, ids in ((self.user_pop, sorted(m.users)), (self.story_pop, sorted(m.stories))):
            ranks = list(range(1, len(ids) + 1))
            self.rng.shuffle(ranks)
            for i, rank in zip(ids, ranks):
                pop.add(i, rank)
        self.say(
            f"resumed from {self.args.state}: {len(m.users)} users, {len(m.stories)} stories, "
            f"{sum(len(v) for v in m.voters.values())} votes, {len(m.comments)} comments"
        )

    # --- reads ---------------------------------------------------------------------

    def read_story(self, sid):
        _, rows = self.timed("keyed read StoryWithVotes", self.r, Q_STORY, (sid,))
        want = self.model.story_row(sid)
        self.compare(f"{Q_STORY} [id={sid}]", rows, [want] if want else [])
        return rows[0] if rows else None

    def read_karma(self, uid):
        _, rows = self.timed("keyed read Karma", self.r, Q_KARMA, (uid,))
        want = self.model.karma_row(uid)
        self.compare(f"{Q_KARMA} [id={uid}]", rows, [want] if want else [])
        return rows[0] if rows else None

    def read_front(self):
        _, rows = self.timed("read FrontPage", self.r, Q_FRONT)
        self.compare(Q_FRONT, rows, self.model.front_page())
        return rows

    def read_comments(self, sid):
        _, rows = self.timed("read comments (index)", self.r, Q_COMMENTS, (sid,))
        self.compare(f"{Q_COMMENTS} [story_id={sid}]", rows, self.model.comments_of(sid))
        return rows

    def read_vote_count(self, sid):
        _, rows = self.timed("count votes (direct)", self.r, Q_VOTE_COUNT, (sid,))
        self.compare(f"{Q_VOTE_COUNT} [story_id={sid}]", rows, [(len(self.model.voters.get(sid, ())),)])

    def read_karma_join(self, uid):
        _, rows = self.timed("karma as a join (automatic view)", self.r, Q_KARMA_JOIN, (uid,))
        k = self.model.karma_value(uid)
        self.compare(f"{Q_KARMA_JOIN} [author={uid}]", rows, [(uid, k)] if k else [])

    def random_read(self):
        x = self.rng.random()
        if x < 0.45:
            self.read_story(self.story_pop.pick())
        elif x < 0.7:
            self.read_karma(self.user_pop.pick())
        elif x < 0.8:
            self.read_front()
        elif x < 0.9:
            self.read_comments(self.story_pop.pick())
        elif x < 0.95:
            self.read_vote_count(self.story_pop.pick())
        else:
            self.read_karma_join(self.user_pop.pick())
        self.count("read")

    # --- writes ------------------------------------------------------------------

    def touch_story(self, sid):
        self.touched_stories.add(sid)
        if sid in self.model.stories:
            self.touched_users.add(self.model.stories[sid][0])

    def w_vote(self, sid=None, uid=None):
        sid = sid if sid is not None else self.story_pop.pick()
        uid = uid if uid is not None else self.user_pop.pick()
        cur, _ = self.timed(
            "write",
            self.w,
            "INSERT INTO votes (story_id, user_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (sid, uid),
        )
        new = self.model.add_vote(sid, uid)
        self.compare(f"rows inserted by a vote of user {uid} for story {sid}", cur.rowcount, 1 if new else 0)
        self.touch_story(sid)
        self.count("vote" if new else "vote again (no change)")

    def w_unvote(self, sid=None, uid=None):
        if sid is None:
            sid = self.story_pop.pick()
            voters = sorted(self.model.voters[sid])
            if not voters:
                return self.w_vote(sid)
            uid = self.rng.choice(voters)
        cur, _ = self.timed(
            "write", self.w, "DELETE FROM votes WHERE story_id = %s AND user_id = %s", (sid, uid)
        )
        self.model.remove_vote(sid, uid)
        self.compare(f"rows deleted by an unvote of user {uid} for story {sid}", cur.rowcount, 1)
        self.touch_story(sid)
        self.count("unvote")

    def w_story(self):
        # A new story and its author's own vote, in one transaction (as
        # Lobsters does): the views see both or neither.
        sid, author = self.model.next_story, self.user_pop.pick()
        title = self.title()
        url = None if self.rng.random() < 0.2 else f"https://example.com/{sid}"
        t0 = time.perf_counter()
        with self.w.transaction():
            self.w.execute(
                "INSERT INTO stories (id, author, title, url) VALUES (%s, %s, %s, %s)",
                (sid, author, title, url),
                prepare=True,
            )
            self.w.execute("INSERT INTO votes (story_id, user_id) VALUES (%s, %s)", (sid, author), prepare=True)
        self.latency.setdefault("write transaction", []).append(time.perf_counter() - t0)
        self.model.add_story(sid, author, title, url)
        self.model.add_vote(sid, author)
        self.story_pop.add_new(sid)
        self.touch_story(sid)
        self.count("new story")

    def w_comment(self):
        cid, sid, author = self.model.next_comment, self.story_pop.pick(), self.user_pop.pick()
        body = self.title().lower()
        self.timed(
            "write",
            self.w,
            "INSERT INTO comments (id, story_id, author, body) VALUES (%s, %s, %s, %s)",
            (cid, sid, author, body),
        )
        self.model.add_comment(cid, sid, author, body)
        self.touch_story(sid)
        self.count("comment")

    def w_edit(self):
        sid, title = self.story_pop.pick(), self.title()
        cur, _ = self.timed("write", self.w, "UPDATE stories SET title = %s WHERE id = %s", (title, sid))
        self.compare(f"rows updated by a title edit of story {sid}", cur.rowcount, 1)
        self.model.set_title(sid, title)
        self.touch_story(sid)
        self.count("edit title")

    def w_user(self):
        uid = self.model.next_user
        self.timed("write", self.w, "INSERT INTO users (id, name) VALUES (%s, %s)", (uid, f"user{uid}"))
        self.model.add_user(uid, f"user{uid}")
        self.user_pop.add_new(uid)
        self.touched_users.add(uid)
        self.count("new user")

    def w_remove_story(self):
        # A moderator removes a story with its votes and comments.
        if len(self.story_pop) < 2:
            return self.w_story()
        sid = self.story_pop.pick()
        self.touch_story(sid)
        t0 = time.perf_counter()
        with self.w.transaction():
            c = self.w.execute("DELETE FROM comments WHERE story_id = %s", (sid,)).rowcount
            v = self.w.execute("DELETE FROM votes WHERE story_id = %s", (sid,)).rowcount
            s = self.w.execute("DELETE FROM stories WHERE id = %s", (sid,)).rowcount
        self.latency.setdefault("write transaction", []).append(time.perf_counter() - t0)
        n_comments = len(self.model.story_comments[sid])
        n_votes = self.model.remove_story(sid)
        self.story_pop.remove(sid)
        self.compare(f"rows deleted removing story {sid} (comments, votes, story)", (c, v, s), (n_comments, n_votes, 1))
        self.count("remove story")

    def w_rolled_back(self):
        # A vote inside a transaction that is rolled back: nothing changes.
        sid, uid = self.story_pop.pick(), self.user_pop.pick()
        with self.w.transaction() as tx:
            self.w.execute(
                "INSERT INTO votes (story_id, user_id) VALUES (%s, %s) ON CONFLICT DO NOTHING", (sid, uid)
            )
            raise psycopg.Rollback(tx)
        self.touch_story(sid)
        self.count("rolled back vote")

    def random_write(self):
        x = self.rng.random()
        for p, op in (
            (0.50, self.w_vote),
            (0.65, self.w_unvote),
            (0.75, self.w_story),
            (0.92, self.w_comment),
            (0.95, self.w_edit),
            (0.97, self.w_user),
            (0.98, self.w_remove_story),
            (1.00, self.w_rolled_back),
        ):
            if x < p:
                return op()

    # --- whole-view checks -----------------------------------------------------------

    def check_views(self, label, every_key=False):
        """Compares every view in full, and keyed reads of what the last writes
        touched (or of every key), with the model."""
        if not self.args.check:
            return
        m = self.model
        key = lambda r: r[0]  # noqa: E731 (ids are unique in each view)
        rows = self.r.execute("SELECT * FROM StoryWithVotes").fetchall()
        self.compare(f"SELECT * FROM StoryWithVotes ({label})", sorted(rows, key=key), m.story_with_votes())
        rows = self.r.execute("SELECT * FROM Karma").fetchall()
        self.compare(f"SELECT * FROM Karma ({label})", sorted(rows, key=key), m.karma())
        rows = self.r.execute("SELECT * FROM FrontPage").fetchall()
        self.compare(
            f"SELECT * FROM FrontPage ({label})",
            sorted(rows, key=key),
            sorted(m.front_page(), key=key),
        )
        self.read_front()
        if every_key:
            stories, users = set(m.stories), set(m.users)
        else:
            stories = set(self.touched_stories)
            users = set(self.touched_users)
            stories.update(self.rng.sample(sorted(m.stories), min(5, len(m.stories))))
            users.update(self.rng.sample(sorted(m.users), min(5, len(m.users))))
        # An id that never existed: no row.
        stories.add(m.next_story + 1000)
        users.add(m.next_user + 1000)
        for sid in sorted(stories):
            self.read_story(sid)
            self.read_vote_count(sid)
        for uid in sorted(users):
            self.read_karma(uid)
            self.read_karma_join(uid)
        self.touched_stories.clear()
        self.touched_users.clear()

    def check_tables(self, label):
        """The base tables hold exactly the model's rows."""
        if not self.args.check:
            return
        want = self.model.table_rows()
        for table, cols in (
            ("users", "id, name"),
            ("stories", "id, author, title, url"),
            ("votes", "story_id, user_id"),
            ("comments", "id, story_id, author, body"),
        ):
            rows = self.r.execute(f"SELECT {cols} FROM {table} ORDER BY {cols.split(',')[0]}").fetchall()
            got = sorted(tuple(r) for r in rows)
            self.compare(f"SELECT {cols} FROM {table} ({label})", got, [tuple(r) for r in want[table]])

    def check_catalog(self):
        if not self.args.check:
            return
        m = self.model
        lsn = int(self.w.info.parameter_status("aqueduct.last_lsn") or 0)
        cur = self.r.execute("SHOW VIEWS")
        cols = [d.name for d in cur.description]
        self.compare(
            "SHOW VIEWS columns",
            cols,
            [
                "name", "watermark", "rows", "keys", "bytes", "status", "state",
                "hits", "misses", "hit_rate", "evictions", "upquery_p50_us", "upquery_p99_us",
            ],
        )
        # Unquoted names are folded to lower case: SHOW VIEWS lists
        # StoryWithVotes as storywithvotes.
        views = {r[cols.index("name")]: dict(zip(cols, r)) for r in cur.fetchall()}
        want_rows = {
            "storywithvotes": len(m.stories),
            "karma": len(m.users),
            "frontpage": min(FRONT_PAGE_SIZE, len(m.stories)),
        }
        for v, n in want_rows.items():
            info = views.get(v)
            if info is None:
                self.compare(f"SHOW VIEWS lists {v}", sorted(views), f"a list with {v}")
                continue
            self.compare(f"SHOW VIEWS: status of {v}", info["status"], "maintained")
            self.compare(f"SHOW VIEWS: rows of {v}", int(info["rows"]), n)
            # Each of these views is scanned, so it is held in full (its rows
            # under one, empty, key); a view also read by key has a keyed
            # reader, partial, holding the keys read (docs/partial-state.md).
            self.compare(f"SHOW VIEWS: {v} is held in full", "full" in info["state"], True)
            self.compare(f"SHOW VIEWS: keys of {v} (at least the full copy's one)", int(info["keys"]) >= 1, True)
            self.compare(
                f"SHOW VIEWS: hit rate of {v} is a fraction",
                0.0 <= float(info["hit_rate"]) <= 1.0,
                True,
            )
            self.compare(f"SHOW VIEWS: {v} reports the bytes it holds", int(info["bytes"]) > 0, True)
            self.compare(
                f"SHOW VIEWS: watermark of {v} reaches this session's last write (LSN {lsn})",
                int(info["watermark"]) >= lsn,
                True,
            )

    def check_graph(self):
        """GET /v1/graph names every view (with --http-port)."""
        if not (self.args.check and self.args.http_port):
            return
        url = f"http://{self.args.host}:{self.args.http_port}/v1/graph"
        with urllib.request.urlopen(url, timeout=10) as resp:
            dot = resp.read().decode()
        self.compare("GET /v1/graph is a DOT digraph", dot.startswith("digraph"), True)
        for v in VIEWS:
            self.compare(f"GET /v1/graph shows view {v}", f"view {v.lower()}" in dot, True)

    def query(self, sql, params=None, prepare=None):
        """Runs a read for a check; an error is a mismatch, not the end."""
        try:
            return self.r.execute(sql, params, prepare=prepare).fetchall()
        except psycopg.Error as e:
            return f"error {e.sqlstate}: {e}"

    def check_fixed_issues(self):
        """What the example once worked around, now checked like any other
        answer: each of these fails the run if it comes back."""
        if not self.args.check:
            return
        m = self.model
        # Unquoted names are case-insensitive: CREATE VIEW StoryWithVotes
        # makes storywithvotes, and every spelling reads it (a mixed-case
        # name in a read used to fail with 42P01).
        for name in ("StoryWithVotes", "storywithvotes", "STORYWITHVOTES", '"storywithvotes"'):
            sql = f"SELECT count(*) FROM {name}"
            self.compare(sql, self.query(sql), [(len(m.stories),)])
        # An automatic view takes the parameter types the client declares
        # (psycopg declares a Python int as a smallint, integer or bigint by
        # its value; a smallint used to fail with 22P03).
        uid = max(m.users, key=lambda u: (m.karma_value(u), -u))
        params = [(Int4(uid), "integer"), (Int8(uid), "bigint"), (70_000, "integer"), (2**40, "bigint")]
        if uid < 2**15:
            params.insert(0, (Int2(uid), "smallint"))
        for param, declared in params:
            author = int(param)
            k = m.karma_value(author)
            for prepare in (True, False):
                what = f"{Q_KARMA_JOIN} [author={author} as {declared}, prepare={prepare}]"
                got = self.query(Q_KARMA_JOIN, (param,), prepare=prepare)
                self.compare(what, got, [(author, k)] if k else [])
        # A view reads another view (Karma reads StoryWithVotes; checked
        # with every read of Karma), and any SELECT is answered: a view
        # joined with a table, by a literal id, goes to an automatic view;
        # a UNION in a subquery is evaluated once.
        front = m.front_page()
        if front:
            sid = front[0][0]
            author, title, _ = m.stories[sid]
            sql = (
                "SELECT users.name, s.title, s.votes FROM StoryWithVotes AS s "
                f"JOIN users ON users.id = s.author WHERE s.id = {sid}"
            )
            self.compare(sql, self.query(sql), [(m.users[author], title, len(m.voters[sid]))])
        sql = "SELECT count(*) FROM (SELECT author FROM stories UNION SELECT user_id FROM votes) AS active"
        active = {a for a, _, _ in m.stories.values()} | {u for us in m.voters.values() for u in us}
        self.compare(sql, self.query(sql), [(len(active),)])

    # --- the walk-through ------------------------------------------------------------

    def tour(self):
        """Votes on the most popular story, and how the views follow."""
        m = self.model
        front = self.read_front()
        self.say("\nFrontPage (SELECT * FROM FrontPage ORDER BY votes DESC, id DESC):")
        for sid, title, votes, comments in front[:5]:
            self.say(f"  {votes:5} votes {comments:4} comments  #{sid} {title}")
        if not front:
            return
        sid = front[0][0]
        author = m.stories[sid][0]
        fresh = next((u for u in sorted(m.users) if u not in m.voters[sid]), None)
        if fresh is None:
            return
        before = self.read_story(sid)
        karma = self.read_karma(author)
        self.say(f"\nstory #{sid} has {before[4]} votes; its author, user {author}, has karma {karma[2]}")
        self.w_vote(sid, fresh)
        after = self.read_story(sid)
        karma = self.read_karma(author)
        self.say(f"user {fresh} votes for it:  {after[4]} votes, karma {karma[2]}")
        self.w_unvote(sid, fresh)
        after = self.read_story(sid)
        karma = self.read_karma(author)
        self.say(f"user {fresh} takes it back: {after[4]} votes, karma {karma[2]}\n")

    # --- the workload ----------------------------------------------------------------

    def workload(self):
        a = self.args
        t0 = time.perf_counter()
        done = 0
        batches = 0
        while done < a.ops and self.mismatches == 0:
            writes = 0
            while writes < a.batch and done < a.ops:
                if self.rng.random() < a.read_ratio:
                    self.random_read()
                else:
                    self.random_write()
                    writes += 1
                done += 1
            batches += 1
            self.check_views(f"after write batch {batches}")
        took = time.perf_counter() - t0
        reads = self.counts.get("read", 0)
        self.say(
            f"workload: {done} operations in {took:.2f} s ({reads} reads, {done - reads} writes"
            + (f", {batches} batches each followed by a check of every view" if a.check else "")
            + ")"
        )
        self.say("  writes: " + ", ".join(f"{n} {op}" for op, n in sorted(self.counts.items()) if op != "read"))
        for kind, lat in sorted(self.latency.items()):
            lat = sorted(lat)
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            self.say(
                f"  {kind:34} {len(lat):6}  median {statistics.median(lat) * 1000:6.2f} ms  p99 {p99 * 1000:6.2f} ms"
            )

    def run(self):
        a = self.args
        if a.resume:
            self.resume()
            self.check_tables("after resuming")
            self.check_views("after resuming", every_key=True)
            self.check_catalog()
            if self.args.check and self.mismatches == 0:
                self.say("the tables and every row and key of the views agree with the saved model")
        else:
            self.reset()
            self.create_schema()
            self.create_views(VIEWS[:1])
            self.load()
            self.create_views(VIEWS[1:])
            self.check_tables("after loading")
            self.check_views("after loading", every_key=True)
        if a.check:
            self.check_fixed_issues()
            self.check_graph()
        if not a.resume:
            self.tour()
        if self.mismatches == 0:
            self.workload()
        if self.mismatches == 0:
            self.check_tables("at the end")
            self.check_views("at the end", every_key=True)
            self.check_catalog()
        if a.state:
            self.model.save(a.state)
            self.say(f"saved the model to {a.state}")
        if a.check:
            if self.mismatches:
                print(f"news: FAILED: {self.mismatches} of {self.checks} checks differ from the model", flush=True)
                return 1
            print(f"news: ok ({self.checks} checks agree with the model)", flush=True)
        return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default=os.environ.get("PGHOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PGPORT", "5433")))
    p.add_argument("--http-port", type=int, help="also check GET /v1/graph on this HTTP port (with --check)")
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--stories", type=int, default=5000)
    p.add_argument("--votes", type=int, default=50000)
    p.add_argument("--comments", type=int, default=10000)
    p.add_argument("--ops", type=int, default=10000, help="operations in the mixed workload")
    p.add_argument("--read-ratio", type=float, default=0.8, help="share of reads in the workload")
    p.add_argument("--batch", type=int, default=50, help="writes between two full checks (--check)")
    p.add_argument("--zipf", type=float, default=1.0, help="skew: the k-th most popular item has weight 1/k^zipf")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check", action="store_true", help="compare every answer with an in-memory model")
    p.add_argument("--state", help="save the model here at the end (and read it with --resume)")
    p.add_argument("--resume", action="store_true", help="carry on from --state instead of creating and loading")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args()
    if a.resume and not a.state:
        p.error("--resume needs --state FILE")
    if min(a.users, a.stories) < 1 or min(a.votes, a.comments, a.ops) < 0 or a.batch < 1:
        p.error("need at least one user and one story, and counts >= 0")
    try:
        sys.exit(News(a).run())
    except psycopg.Error as e:
        print(f"news: FAILED: {type(e).__name__} (SQLSTATE {e.sqlstate}): {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

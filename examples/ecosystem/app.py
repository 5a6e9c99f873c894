#!/usr/bin/env python3
"""The main application of the ecosystem: a small social site.

    app.py --http 127.0.0.1:8433 --schema        # tables and publications
    app.py --http 127.0.0.1:8433 --actions 400 --rate 100 --seconds 30 --seed 1

Several sessions at once act for users: users sign up, write posts (some
as drafts, published later), edit them, comment on other users' posts and
like them, now and then change their name. Every request names the user
it acts for (header Aqueduct-Acting-User: user-<id>), so that what one
user does reaches subscribers in order. Seeded, and bounded both in
actions and in time; a second run continues after what is there. Post
titles and bodies are made of a few simple lower-case words, so that a
full-text index and a LIKE agree on what matches.
"""
import argparse
import os
import random
import sys
import threading
import time

from common import quote, rows, schema_statements, sql

WORDS = [
    "river", "garden", "signal", "harbour", "winter", "echo", "orbit", "lantern",
    "meridian", "copper", "forest", "violin", "desert", "pepper", "marble",
    "comet", "tulip", "falcon", "glacier", "saffron",
]
FIRST = ["ann", "bob", "cleo", "dev", "eli", "fay", "gus", "hana", "ivo", "jun"]


class World:
    """What the application knows has been committed (only what a request
    that succeeded wrote is added)."""

    def __init__(self, base):
        self.lock = threading.Lock()
        self.users = [r[0] for r in rows(base, "SELECT id FROM users ORDER BY id")]
        self.published = {}  # post id -> author id
        self.drafts = {}
        for pid, author, draft in rows(base, "SELECT id, author_id, draft FROM posts ORDER BY id"):
            (self.drafts if draft else self.published)[pid] = author
        self.next_user = (max(self.users) if self.users else 0) + 1
        self.next_post = max(list(self.published) + list(self.drafts) + [0]) + 1
        self.next_comment = (rows(base, "SELECT max(id) FROM comments")[0][0] or 0) + 1

    def take(self, what):
        with self.lock:
            n = getattr(self, what)
            setattr(self, what, n + 1)
            return n


def count(world, counts, what):
    with world.lock:
        counts[what] += 1


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def session(base, world, rng, budget, deadline, counts, interval):
    tick = time.monotonic()
    while time.monotonic() < deadline:
        tick += interval
        pause = tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        with world.lock:
            if budget[0] <= 0:
                return
            budget[0] -= 1
            users = list(world.users)
            published = list(world.published.items())
            drafts = list(world.drafts.items())
        r = rng.random()
        if len(users) < 3 or r < 0.12:
            uid = world.take("next_user")
            first = rng.choice(FIRST)
            # Mixed case: the publication sends lower(email) as email_lc.
            email = f"{first.title()}.{uid}@Example.ORG"
            sql(base, "INSERT INTO users (id, name, email) VALUES ($1, $2, $3)",
                [uid, f"{first} {rng.choice(WORDS)}", email], user=f"user-{uid}")
            with world.lock:
                world.users.append(uid)
            count(world, counts, "signup")
        elif r < 0.40:
            author = rng.choice(users)
            pid = world.take("next_post")
            draft = rng.random() < 0.3
            sql(base, "INSERT INTO posts (id, author_id, title, body, draft) VALUES ($1, $2, $3, $4, $5)",
                [pid, author, words(rng, 2, 3), words(rng, 5, 12), draft], user=f"user-{author}")
            with world.lock:
                (world.drafts if draft else world.published)[pid] = author
            count(world, counts, "draft" if draft else "post")
        elif r < 0.50 and drafts:
            pid, author = rng.choice(drafts)
            with world.lock:
                if world.drafts.pop(pid, None) is None:
                    continue  # another session publishes it
            sql(base, "UPDATE posts SET draft = false WHERE id = $1", [pid], user=f"user-{author}")
            with world.lock:
                world.published[pid] = author
            count(world, counts, "publish")
        elif r < 0.58 and published:
            pid, author = rng.choice(published)
            sql(base, "UPDATE posts SET body = $1 WHERE id = $2", [words(rng, 5, 12), pid],
                user=f"user-{author}")
            count(world, counts, "edit")
        elif r < 0.95 and published:
            pid, author = rng.choice(published)
            others = [u for u in users if u != author]
            if not others:
                continue
            who = rng.choice(others)
            cid = world.take("next_comment")
            stmts = [f"INSERT INTO comments (id, post_id, author_id, body) "
                     f"VALUES ({cid}, {pid}, {who}, {quote(words(rng, 2, 8))})"]
            # A comment often comes with a like, in one transaction.
            if r < 0.80:
                stmts.append(f"INSERT INTO likes (post_id, user_id) VALUES ({pid}, {who}) "
                             "ON CONFLICT DO NOTHING")
            sql(base, "BEGIN; " + "; ".join(stmts) + "; COMMIT", user=f"user-{who}")
            count(world, counts, "comment")
        elif published:
            uid = rng.choice(users)
            sql(base, "UPDATE users SET name = $1 WHERE id = $2",
                [f"{rng.choice(FIRST)} {rng.choice(WORDS)}", uid], user=f"user-{uid}")
            count(world, counts, "rename")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="127.0.0.1:8433")
    ap.add_argument("--schema", action="store_true", help="create the tables and publications, and exit")
    ap.add_argument("--actions", type=int, default=400, help="actions in all (bound)")
    ap.add_argument("--seconds", type=float, default=60.0, help="time bound")
    ap.add_argument("--rate", type=float, default=100.0, help="actions per second at most, in all")
    ap.add_argument("--sessions", type=int, default=4, help="sessions acting at once")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    base = "http://" + a.http
    if a.schema:
        for stmt in schema_statements(os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.sql")):
            sql(base, stmt)
        return
    world = World(base)
    budget = [a.actions]
    deadline = time.monotonic() + a.seconds
    counts = {k: 0 for k in ("signup", "post", "draft", "publish", "edit", "comment", "rename")}
    threads = []
    errors = []

    def run(i):
        try:
            session(base, world, random.Random(a.seed * 1000 + i), budget, deadline, counts, a.sessions / a.rate)
        except Exception as e:  # reported below, the run fails
            errors.append(e)

    started = time.monotonic()
    for i in range(a.sessions):
        t = threading.Thread(target=run, args=(i,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    if errors:
        print(f"app: {errors[0]}", file=sys.stderr)
        sys.exit(1)
    done = " ".join(f"{k} {v}" for k, v in counts.items())
    print(f"app: {done} in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()

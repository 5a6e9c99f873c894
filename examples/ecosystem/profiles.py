#!/usr/bin/env python3
"""The profile service: users with their decorations, from `profiles`.

    aqueduct subscribe --from 127.0.0.1:8433 --publication profiles --name profiles \\
        --mode causal --into sqlite:profiles.db --until-caught-up   # first bootstrap
    profiles.py watch --db profiles.db        # record any decoration arriving early
    aqueduct subscribe ... --into sqlite:profiles.db                 # follow
    profiles.py verify --db profiles.db --jsonl profiles.jsonl --http 127.0.0.1:8433

`profiles` publishes users (id, name) and user_interests, which the
decorator writes on the same server; in causal mode a decoration may
never arrive before the user it decorates. `watch` adds a trigger to the
copy that records, in `early_interests`, every user_interests row inserted
while its user is not there. `verify` checks that nothing was recorded,
that the order holds in a JSON-lines recording of the same stream too
(another subscriber of `profiles`, `--into jsonl:FILE`), and that the
copy equals the server.
"""
import argparse
import json
import sqlite3
import sys

from common import rows

WATCH = """
CREATE TABLE IF NOT EXISTS early_interests (user_id integer, version integer);
CREATE TRIGGER IF NOT EXISTS interests_before_user AFTER INSERT ON user_interests
WHEN NOT EXISTS (SELECT 1 FROM users WHERE id = new.user_id) BEGIN
    INSERT INTO early_interests VALUES (new.user_id, new._aq_version);
END;
"""


def connect(path):
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA busy_timeout = 30000")
    return db


def watch(a):
    db = connect(a.db)
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'user_interests'").fetchone():
        sys.exit("profiles: no user_interests table yet: bootstrap the subscriber first")
    db.executescript(WATCH)
    print("profiles: watching for decorations that arrive before their user")


def verify(a):
    db = connect(a.db)
    base = "http://" + a.http
    failures = []
    early = db.execute("SELECT user_id, version FROM early_interests ORDER BY version").fetchall()
    if early:
        failures.append(f"{len(early)} decorations arrived before their user, e.g. {early[:5]}")
    # The JSON-lines recording: each line one applied transaction, in the
    # order it was applied (at least once, so lines may repeat).
    users, lines = set(), 0
    with open(a.jsonl) as f:
        for line in f:
            m = json.loads(line)
            if m.get("type") != "txn":
                continue
            lines += 1
            for c in m["changes"]:
                if c["object"] == "users" and c["op"] != "delete":
                    users.add(c["key"][0])
            for c in m["changes"]:
                if c["object"] == "user_interests" and c["op"] == "insert" and c["key"][0] not in users:
                    failures.append(f"jsonl: interests of user {c['key'][0]} (LSN {m['lsn']}) before the user")
    got_users = sorted(db.execute("SELECT id, name FROM users"))
    want_users = sorted(rows(base, "SELECT id, name FROM users"))
    got_interests = sorted(db.execute("SELECT user_id, interests FROM user_interests"))
    want_interests = sorted(rows(base, "SELECT user_id, interests FROM user_interests"))
    if got_users != want_users:
        failures.append(f"users differ: {len(got_users)} here, {len(want_users)} on the server; "
                        f"e.g. {sorted(set(got_users) ^ set(want_users))[:5]}")
    if got_interests != want_interests:
        failures.append(f"user_interests differ: {len(got_interests)} here, {len(want_interests)} on the server; "
                        f"e.g. {sorted(set(got_interests) ^ set(want_interests))[:5]}")
    if not want_interests:
        failures.append("the server has no decorations: the decorator wrote nothing")
    if failures:
        for f in failures[:20]:
            print(f"profiles: {f}", file=sys.stderr)
        sys.exit(1)
    print(f"profiles: ok ({len(want_users)} users, {len(want_interests)} decorated; no decoration "
          f"before its user, in the copy or in {lines} recorded transactions)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["watch", "verify"])
    ap.add_argument("--db", required=True)
    ap.add_argument("--jsonl", help="a jsonl: subscriber's file of the same publication (verify)")
    ap.add_argument("--http", default="127.0.0.1:8433")
    a = ap.parse_args()
    watch(a) if a.command == "watch" else verify(a)


if __name__ == "__main__":
    main()

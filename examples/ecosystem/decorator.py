#!/usr/bin/env python3
"""The decorator: derives each user's interests from its own copy of
`social` and writes them back to the server as `user_interests`.

    aqueduct subscribe --from 127.0.0.1:8433 --publication social --name decorator \\
        --mode causal --into sqlite:decorator.db                    # its copy
    decorator.py --db decorator.db --http 127.0.0.1:8433 --until stop-file
    decorator.py --db decorator.db --http 127.0.0.1:8433 --once

A user's interests are the three words that come most often in the posts
they published (ties by the word), or 'newcomer' before their first post.
The decorator reads users and posts only from its copy, never from the
server, and writes `INSERT ... ON CONFLICT (user_id) DO UPDATE` on the
server, acting as the user `decorator` (not as the user it decorates):
what orders a decoration after its user for subscribers of `profiles` is
the foreign key, whose check reads the users row, so the decoration's
transaction depends on the transaction that created the user.

Synapse's decorators (section 3.1) publish from a database of their own;
here the decoration goes to the same server, which publishes it with the
users it decorates in `profiles`.
"""
import argparse
import collections
import os
import sqlite3
import sys
import time

from common import rows, sql


def interests(db):
    """user id -> interests, for every user in the copy."""
    words = collections.defaultdict(collections.Counter)
    for author, title, body in db.execute("SELECT author_id, title, body FROM posts"):
        words[author].update((title + " " + body).split())
    out = {}
    for (uid,) in db.execute("SELECT id FROM users"):
        top = sorted(words[uid].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        out[uid] = " ".join(sorted(w for w, _ in top)) or "newcomer"
    return out


def decorate(db, base, written):
    """Writes every decoration that changed since `written`; returns how
    many it wrote."""
    try:
        now = interests(db)
    except sqlite3.OperationalError:
        return 0  # the copy has no tables yet, or is busy
    n = 0
    for uid, text in sorted(now.items()):
        if written.get(uid) == text:
            continue
        # Runs twice harmlessly, so it may wait for a restarting server.
        sql(base, "INSERT INTO user_interests (user_id, interests) VALUES ($1, $2) "
            "ON CONFLICT (user_id) DO UPDATE SET interests = excluded.interests",
            [uid, text], user="decorator", retry_down=60)
        written[uid] = text
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True, help="the decorator's SQLite copy of social")
    ap.add_argument("--http", default="127.0.0.1:8433")
    ap.add_argument("--until", help="decorate every half second until this file exists")
    ap.add_argument("--once", action="store_true", help="one pass, then exit")
    a = ap.parse_args()
    base = "http://" + a.http
    written = dict(rows(base, "SELECT user_id, interests FROM user_interests"))
    db = sqlite3.connect(a.db, timeout=30)
    total = passes = 0
    while True:
        total += decorate(db, base, written)
        passes += 1
        if a.once or (a.until and os.path.exists(a.until)):
            break
        time.sleep(0.5)
    print(f"decorator: {total} decorations written in {passes} passes", file=sys.stderr)


if __name__ == "__main__":
    main()

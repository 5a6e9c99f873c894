#!/usr/bin/env python3
"""Search: full-text search over the published posts, in SQLite.

    aqueduct subscribe --from 127.0.0.1:8433 --publication social --name search \\
        --mode causal --into sqlite:search.db --until-caught-up    # first bootstrap
    search.py index --db search.db           # FTS5 index kept by triggers
    aqueduct subscribe ... --into sqlite:search.db                  # follow
    search.py query --db search.db 'river AND garden'
    search.py verify --db search.db --http 127.0.0.1:8433

The agent keeps the sink's `posts` table (published posts only: drafts are
filtered out on the server); `index` adds an FTS5 table `posts_fts` over
its title and body, with external content (the rows stay in `posts`),
kept up to date by triggers on `posts` whatever the agent does to it
(insert, the update of an upsert, delete). `verify` runs a few full-text
queries on the copy and the same with ILIKE on the server, and compares
the post ids.
"""
import argparse
import sqlite3
import sys

from common import rows

INDEX = """
CREATE VIRTUAL TABLE IF NOT EXISTS posts_fts USING fts5(
    title, body, content='posts', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS posts_fts_insert AFTER INSERT ON posts BEGIN
    INSERT INTO posts_fts (rowid, title, body) VALUES (new.id, new.title, new.body);
END;
CREATE TRIGGER IF NOT EXISTS posts_fts_delete AFTER DELETE ON posts BEGIN
    INSERT INTO posts_fts (posts_fts, rowid, title, body) VALUES ('delete', old.id, old.title, old.body);
END;
CREATE TRIGGER IF NOT EXISTS posts_fts_update AFTER UPDATE ON posts BEGIN
    INSERT INTO posts_fts (posts_fts, rowid, title, body) VALUES ('delete', old.id, old.title, old.body);
    INSERT INTO posts_fts (rowid, title, body) VALUES (new.id, new.title, new.body);
END;
"""

# (FTS5 query, the same as a condition for the server's posts). Words are
# matched whole: ' ' || body || ' ' ILIKE '% word %'.
def has(col, text):
    return f"(' ' || {col} || ' ') ILIKE '% {text} %'"


QUERIES = [
    ("river", f"({has('title', 'river')} OR {has('body', 'river')})"),
    ("body:comet", has("body", "comet")),
    ("title:garden AND body:winter", f"{has('title', 'garden')} AND {has('body', 'winter')}"),
    ("body:(falcon OR tulip) NOT body:echo",
     f"({has('body', 'falcon')} OR {has('body', 'tulip')}) AND NOT {has('body', 'echo')}"),
    ('body:"copper forest"', has("body", "copper forest")),
    ("title:saffron* AND body:orbit", f"{has('title', 'saffron')} AND {has('body', 'orbit')}"),
]


def connect(path):
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA busy_timeout = 30000")
    return db


def index(a):
    db = connect(a.db)
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'posts'").fetchone():
        sys.exit("search: no posts table yet: bootstrap the subscriber first")
    with db:
        db.executescript("BEGIN;" + INDEX + "INSERT INTO posts_fts (posts_fts) VALUES ('rebuild'); COMMIT;")
    n = db.execute("SELECT count(*) FROM posts_fts").fetchone()[0]
    print(f"search: posts_fts indexes {n} posts")


def query(a):
    db = connect(a.db)
    for pid, title in db.execute(
            "SELECT p.id, p.title FROM posts_fts JOIN posts p ON p.id = posts_fts.rowid "
            "WHERE posts_fts MATCH ? ORDER BY rank", [a.text]):
        print(pid, title)


def verify(a):
    db = connect(a.db)
    base = "http://" + a.http
    failures = []
    # The index agrees with its content table.
    try:
        db.execute("INSERT INTO posts_fts (posts_fts, rank) VALUES ('integrity-check', 1)")
    except sqlite3.DatabaseError as e:
        failures.append(f"posts_fts integrity-check: {e}")
    summary = []
    for fts, cond in QUERIES:
        got = sorted(r[0] for r in db.execute("SELECT rowid FROM posts_fts WHERE posts_fts MATCH ?", [fts]))
        want = sorted(r[0] for r in rows(base, f"SELECT id FROM posts WHERE NOT draft AND {cond}"))
        if got != want:
            failures.append(f"{fts!r}: the index finds {len(got)} posts, the server {len(want)}; "
                            f"only here {sorted(set(got) - set(want))[:5]}, "
                            f"only there {sorted(set(want) - set(got))[:5]}")
        summary.append(str(len(want)))
    if failures:
        for f in failures:
            print(f"search: {f}", file=sys.stderr)
        sys.exit(1)
    print(f"search: ok ({len(QUERIES)} full-text queries agree with ILIKE on the server: "
          f"{', '.join(summary)} posts)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["index", "query", "verify"])
    ap.add_argument("--db", required=True)
    ap.add_argument("--http", default="127.0.0.1:8433")
    ap.add_argument("text", nargs="?")
    a = ap.parse_args()
    {"index": index, "query": query, "verify": verify}[a.command](a)


if __name__ == "__main__":
    main()

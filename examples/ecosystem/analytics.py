#!/usr/bin/env python3
"""Analytics: `social` in MariaDB, applied in weak order by four workers.

    aqueduct subscribe --from 127.0.0.1:8433 --publication social --name analytics \\
        --mode weak --workers 4 --state-dir analytics-state \\
        --into mariadb://root@127.0.0.1:3306/analytics
    analytics.py verify --mariadb 127.0.0.1:3306/analytics --http 127.0.0.1:8433

Weak order is all a report needs: transactions are applied in parallel,
in any order, each row guarded by its version, so the copy converges.
Once the subscriber has caught up, `verify` runs the same reports on the
copy (with the `mariadb` client) and on the server and compares them.
"""
import argparse
import subprocess
import sys

from common import rows

# (report, SQL on the copy, SQL on the server). The copy has only
# published posts and the lower-cased email as email_lc.
REPORTS = [
    ("users", "SELECT count(*) FROM users", "SELECT count(*) FROM users"),
    ("posts", "SELECT count(*) FROM posts", "SELECT count(*) FROM posts WHERE NOT draft"),
    ("comments", "SELECT count(*) FROM comments", "SELECT count(*) FROM comments"),
    ("posts per author",
     "SELECT author_id, count(*) FROM posts GROUP BY author_id ORDER BY author_id",
     "SELECT author_id, count(*) FROM posts WHERE NOT draft GROUP BY author_id ORDER BY author_id"),
    ("comments per post",
     "SELECT post_id, count(*) FROM comments GROUP BY post_id ORDER BY post_id",
     "SELECT post_id, count(*) FROM comments GROUP BY post_id ORDER BY post_id"),
    ("top commenters",
     "SELECT author_id, count(*) AS n FROM comments GROUP BY author_id ORDER BY n DESC, author_id LIMIT 5",
     "SELECT author_id, count(*) AS n FROM comments GROUP BY author_id ORDER BY n DESC, author_id LIMIT 5"),
    ("comment length", "SELECT sum(length(body)), max(length(body)) FROM comments",
     "SELECT sum(length(body)), max(length(body)) FROM comments"),
    ("emails at example.org", "SELECT count(*) FROM users WHERE email_lc LIKE '%@example.org'",
     "SELECT count(*) FROM users WHERE lower(email) LIKE '%@example.org'"),
    ("user names", "SELECT id, name FROM users ORDER BY id", "SELECT id, name FROM users ORDER BY id"),
    ("post texts", "SELECT id, author_id, title, body FROM posts ORDER BY id",
     "SELECT id, author_id, title, body FROM posts WHERE NOT draft ORDER BY id"),
]


def mariadb(target, query):
    hostport, db = target.split("/", 1)
    host, port = hostport.rsplit(":", 1)
    out = subprocess.run(
        ["mariadb", "--no-defaults", "--protocol=TCP", "-h", host, "-P", port, "-u", "root",
         "--batch", "--skip-column-names", db, "-e", query],
        check=True, capture_output=True, text=True, timeout=60).stdout
    return [tuple(line.split("\t")) for line in out.splitlines()]


def norm(rs):
    return [tuple("NULL" if v is None else str(v) for v in r) for r in rs]


def verify(a):
    base = "http://" + a.http
    failures = []
    for name, copy_sql, server_sql in REPORTS:
        got = norm(mariadb(a.mariadb, copy_sql))
        want = norm(rows(base, server_sql))
        if got != want:
            failures.append(f"{name}: the copy says {got[:5]}, the server {want[:5]}")
    if failures:
        for f in failures:
            print(f"analytics: {f}", file=sys.stderr)
        sys.exit(1)
    counts = {n: rows(base, s)[0][0] for n, _, s in REPORTS[:3]}
    print(f"analytics: ok ({len(REPORTS)} reports agree with the server: "
          f"{counts['users']} users, {counts['posts']} posts, {counts['comments']} comments)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["verify"])
    ap.add_argument("--mariadb", required=True, help="host:port/database of the copy")
    ap.add_argument("--http", default="127.0.0.1:8433")
    a = ap.parse_args()
    verify(a)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The mailer: an observer of `social`, fed by per-change webhook callbacks.

    mailer.py serve --port 8090 --dir mailer/ [--delay-ms 5]    # the receiver
    aqueduct subscribe --from 127.0.0.1:8433 --publication social --name mailer \\
        --mode causal --state-dir mailer/state \\
        --into 'webhook:http://127.0.0.1:8090/mail?per_change=1'
    mailer.py verify --dir mailer/ --http 127.0.0.1:8433

The agent POSTs each change alone to /mail/{object}/{created|updated|
destroyed}. The mailer "mails" a welcome for a new user, the author's
followers for a new post, and a post's author for a new comment: for that
it relies on causal order (Synapse's observers), since it needs the user
and the post it writes about. It checks that promise on every callback:

  - never posts/created before users/created of the post's author;
  - never comments/created before posts/created of its post and
    users/created of its author.

Delivery is at least once: a callback may come again (same
Idempotency-Key, `{txid}:{index}`), and is then recorded but not mailed
twice. Every callback is answered 200 and appended to callbacks.jsonl;
each broken promise to violations.jsonl. `verify` reads them back, checks
the order again from the log, and checks against the server that every
user, published post and comment was mailed about.
"""
import argparse
import json
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import rows


class State:
    def __init__(self, directory):
        self.lock = threading.Lock()
        self.users = {}   # id -> name
        self.posts = {}   # id -> (author, title)
        self.keys = set()
        self.mails = 0
        self.log = open(os.path.join(directory, "callbacks.jsonl"), "a")
        self.violations = open(os.path.join(directory, "violations.jsonl"), "a")

    def violation(self, text, change):
        self.violations.write(json.dumps({"violation": text, "change": change}) + "\n")
        self.violations.flush()

    def callback(self, obj, event, change, key):
        """Records one callback; called under the lock, before answering."""
        self.log.write(json.dumps({"object": obj, "event": event, "key": key, "change": change}) + "\n")
        self.log.flush()
        problems = check(self.users, self.posts, obj, event, change)
        for p in problems:
            self.violation(p, change)
        if key not in self.keys:
            self.keys.add(key)
            if event == "created" and obj in ("users", "posts", "comments"):
                self.mails += 1  # a welcome, a new-post notice, a comment notice


def check(users, posts, obj, event, change):
    """Applies one callback to what the mailer knows; returns the causal
    promises it breaks."""
    attrs = change.get("attrs") or {}
    problems = []
    if obj == "users" and event in ("created", "updated"):
        users[attrs["id"]] = attrs.get("name")
    elif obj == "posts" and event in ("created", "updated"):
        if event == "created" and attrs["author_id"] not in users:
            problems.append(f"posts/created {attrs['id']} before users/created {attrs['author_id']}")
        posts[attrs["id"]] = (attrs["author_id"], attrs.get("title"))
    elif obj == "comments" and event == "created":
        if attrs["post_id"] not in posts:
            problems.append(f"comments/created {attrs['id']} before posts/created {attrs['post_id']}")
        if attrs["author_id"] not in users:
            problems.append(f"comments/created {attrs['id']} before users/created {attrs['author_id']}")
    return problems


def serve(a):
    state = State(a.dir)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) != 3 or parts[0] != "mail":
                self.send_error(404)
                return
            try:
                change = json.loads(body)
            except ValueError:
                self.send_error(400)
                return
            # Mailing takes a while (an SMTP server, elsewhere); callbacks
            # of independent changes overlap meanwhile.
            if a.delay_ms > 0:
                time.sleep(random.uniform(0, a.delay_ms) / 1000)
            with state.lock:
                state.callback(parts[1], parts[2], change, self.headers.get("Idempotency-Key"))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            with state.lock:
                answer = json.dumps({"mails": state.mails, "callbacks": len(state.keys)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    print(f"mailer: listening on 127.0.0.1:{a.port}", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def verify(a):
    """Exit status 0 when the promises held and everything was mailed."""
    failures = []
    with open(os.path.join(a.dir, "violations.jsonl")) as f:
        seen = [json.loads(l)["violation"] for l in f if l.strip()]
    failures += [f"the receiver saw: {v}" for v in seen[:5]]
    users, posts, created, keys = {}, {}, {"users": set(), "posts": set(), "comments": set()}, set()
    callbacks = 0
    with open(os.path.join(a.dir, "callbacks.jsonl")) as f:
        for line in f:
            c = json.loads(line)
            callbacks += 1
            keys.add(c["key"])
            for p in check(users, posts, c["object"], c["event"], c["change"]):
                failures.append(f"in the log: {p}")
            if c["event"] == "created" and c["object"] in created:
                created[c["object"]].add(c["change"]["attrs"]["id"])
    base = "http://" + a.http
    expected = {
        "users": {r[0] for r in rows(base, "SELECT id FROM users")},
        "posts": {r[0] for r in rows(base, "SELECT id FROM posts WHERE NOT draft")},
        "comments": {r[0] for r in rows(base, "SELECT id FROM comments")},
    }
    for obj, ids in expected.items():
        missing = ids - created[obj]
        extra = created[obj] - ids
        if missing:
            failures.append(f"{len(missing)} {obj} never mailed about, e.g. {sorted(missing)[:5]}")
        if extra:
            failures.append(f"{len(extra)} {obj} mailed about that the server does not have: {sorted(extra)[:5]}")
    if failures:
        for f in failures[:20]:
            print(f"mailer: {f}", file=sys.stderr)
        sys.exit(1)
    counts = ", ".join(f"{len(v)} {k}" for k, v in expected.items())
    print(f"mailer: ok ({callbacks} callbacks, {callbacks - len(keys)} of them repeated; "
          f"mailed about {counts}, always in causal order)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["serve", "verify"])
    ap.add_argument("--dir", required=True, help="where callbacks.jsonl and violations.jsonl are")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--delay-ms", type=float, default=0, help="each callback takes up to this long (serve)")
    ap.add_argument("--http", default="127.0.0.1:8433", help="the Aqueduct server (verify)")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    serve(a) if a.command == "serve" else verify(a)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Publishes TV-guide reference data to Aqueduct at a steady rate.

    publisher.py --http 127.0.0.1:8433 --schema      # create the tables
    publisher.py --http 127.0.0.1:8433 --rate 20 --seconds 60

Each write is one POST /v1/sql with {"sql": ..., "params": [...]}: new
titles with their seasons and episodes, new airings, renamed episodes,
rescheduled and cancelled airings. Python standard library only.
"""
import argparse
import datetime
import json
import os
import random
import sys
import time
import urllib.error
import urllib.request

CHANNELS = ["one", "two", "news", "kids", "films"]
WORDS = ["night", "river", "garden", "signal", "harbour", "winter", "echo", "orbit", "lantern", "meridian"]


def sql(base, text, params=()):
    body = json.dumps({"sql": text, "params": list(params)}).encode()
    req = urllib.request.Request(base + "/v1/sql", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{text}: {e.read().decode(errors='replace')}") from None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="127.0.0.1:8433")
    ap.add_argument("--schema", action="store_true", help="create the tables and exit")
    ap.add_argument("--rate", type=float, default=20.0, help="writes per second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    base = "http://" + a.http
    if a.schema:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema.sql")) as f:
            text = "\n".join(l for l in f.read().splitlines() if not l.strip().startswith("--"))
        for stmt in text.split(";"):
            if stmt.strip():
                sql(base, stmt)
        return
    rng = random.Random(a.seed)
    # Continue after what is there.
    next_title = (sql(base, "SELECT max(id) FROM titles")["rows"][0][0] or 0) + 1
    next_episode = (sql(base, "SELECT max(id) FROM episodes")["rows"][0][0] or 0) + 1
    day = datetime.datetime(2024, 6, 1, tzinfo=datetime.timezone.utc)
    interval = 1.0 / a.rate
    deadline = time.monotonic() + a.seconds
    tick = time.monotonic()
    writes = 0
    while time.monotonic() < deadline:
        r = rng.random()
        if r < 0.1 or next_episode == 1:
            # A new series: title, a season, its episodes, in one transaction.
            name = f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()} {next_title}"
            eps = []
            for n in range(1, 5):
                eps.append(f"INSERT INTO episodes VALUES ({next_episode}, {next_title}, 1, {n}, 'Episode {n}', {rng.choice([25, 45, 60])})")
                next_episode += 1
            sql(base, "BEGIN; "
                f"INSERT INTO titles VALUES ({next_title}, '{name}', 'series', {rng.randint(1990, 2024)}); "
                f"INSERT INTO seasons VALUES ({next_title}, 1, 2024); " + "; ".join(eps) + "; COMMIT")
            next_title += 1
        elif r < 0.7:
            # A new airing (or a replacement in the same slot).
            starts = day + datetime.timedelta(minutes=30 * rng.randrange(0, 48 * 7))
            sql(base, "INSERT INTO schedules VALUES ($1, $2, $3) ON CONFLICT (channel, starts_at) "
                "DO UPDATE SET episode_id = excluded.episode_id",
                [rng.choice(CHANNELS), starts.strftime('%Y-%m-%d %H:%M:%S+00'), rng.randrange(1, next_episode)])
        elif r < 0.8:
            sql(base, "UPDATE episodes SET name = $1 WHERE id = $2",
                [f"The {rng.choice(WORDS).title()}", rng.randrange(1, next_episode)])
        else:
            # A cancelled airing.
            starts = day + datetime.timedelta(minutes=30 * rng.randrange(0, 48 * 7))
            sql(base, "DELETE FROM schedules WHERE channel = $1 AND starts_at = $2", [rng.choice(CHANNELS), starts.strftime('%Y-%m-%d %H:%M:%S+00')])
        writes += 1
        tick += interval
        pause = tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    print(f"publisher: {writes} writes", file=sys.stderr)


if __name__ == "__main__":
    main()

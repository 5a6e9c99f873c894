#!/usr/bin/env python3
"""Plots the followers benchmark from its JSON result.

Usage: python3 bench/plot_replication.py [--result FILE] [--out FILE]

Reads FILE (default docs/bench-results/replication.json, written by
`bench replication --json ...`) and writes a PNG (default
docs/img/replication.png): seconds for a new follower to copy the log as
written and the compacted log, against the 30 s target for 1,000,000
entries, and the restart of a node with that log to its first read.
Needs matplotlib.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--result", default=os.path.join(ROOT, "docs/bench-results/replication.json"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs/img/replication.png"))
    a = p.parse_args()
    with open(a.result) as f:
        report = json.load(f)
    r = report["results"]
    labels, seconds, notes = [], [], []
    for run in r["catch_up"]:
        labels.append("catch-up,\nlog " + run["log"])
        seconds.append(run["seconds"])
        notes.append(f'{run["records"]:,} records\n{run["records_per_s"] / 1000:.0f} k/s')
    labels.append("restart to\nfirst read")
    seconds.append(r["restart_to_first_read_s"])
    notes.append(f'{r["source_last_lsn"]:,}-entry log')
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = ax.bar(labels, seconds, color=["tab:blue", "tab:cyan", "tab:gray"])
    ax.axhline(30, color="tab:red", linestyle="--", label="catch-up target: 30 s for 1,000,000 entries")
    for b, n in zip(bars, notes):
        ax.annotate(n, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    m = report["machine"]
    opts = report["options"]
    ax.set_ylabel("seconds")
    ax.set_title(
        f'Followers: {opts["entries"]:,} entries of {opts["value_bytes"]} B, fsync {opts["fsync"]}\n'
        f'{m["cores"]} cores, {m["cpu_model"]}, one machine, loopback',
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax.set_ylim(0, max(32, max(seconds) * 1.25))
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote", a.out)


if __name__ == "__main__":
    main()

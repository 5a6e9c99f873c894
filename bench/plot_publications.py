#!/usr/bin/env python3
"""Plots the publications benchmark from its CSV results.

Usage: python3 bench/plot_publications.py [--results DIR] [--out DIR]

Reads DIR/publications-{throughput,latency,callback,overhead}.csv (default
docs/bench-results, written by `bench publications --csv-dir ...`) and
writes two PNGs into --out (default docs/img):
  publications-scaling.png, Synapse's Fig. 13 (b) and (c):
    left:  end-to-end changes/s into PostgreSQL against agent workers, a
           line per mode, the baselines as horizontal lines;
    right: the same with a sleeping sink-side callback;
  publications-latency.png:
    left:  publish-to-apply latency p50 and p99 at a fixed offered rate;
    right: publisher writes/s with 0, 1 and 2 subscribers, relative to 0.
Needs matplotlib.
"""

import argparse
import csv
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODE_COLORS = {"weak": "tab:green", "causal": "tab:blue", "global": "tab:red"}
BASE_STYLE = {
    "postgres-logical": ("tab:orange", "--", "PostgreSQL logical replication"),
    "rabbitmq": ("tab:purple", ":", "writer + RabbitMQ + consumer"),
}


def read(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def scaling_panel(ax, rows, key, title, ylabel):
    by_mode = defaultdict(list)
    for r in rows:
        if r["system"] == "aqueduct":
            by_mode[r["mode"]].append((int(r["workers"]), fnum(r[key])))
    for mode, pts in by_mode.items():
        pts.sort()
        xs, ys = zip(*pts)
        ax.plot(xs, ys, "o-", color=MODE_COLORS.get(mode), label=f"Aqueduct {mode}")
    for sysname, (color, style, label) in BASE_STYLE.items():
        pts = sorted(
            (int(r["workers"]), fnum(r[key])) for r in rows if r["system"] == sysname
        )
        if not pts:
            continue
        if len(pts) == 1:
            ax.axhline(pts[0][1], color=color, linestyle=style, label=f"{label} (1 apply)")
        else:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, "s" + style, color=color, label=f"{label} (consumers)")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16])
    ax.set_xticklabels(["1", "2", "4", "8", "16"])
    ax.set_xlabel("agent workers")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "bench-results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    a = ap.parse_args()
    thr = read(os.path.join(a.results, "publications-throughput.csv"))
    lat = read(os.path.join(a.results, "publications-latency.csv"))
    cb = read(os.path.join(a.results, "publications-callback.csv"))
    ov = read(os.path.join(a.results, "publications-overhead.csv"))
    os.makedirs(a.out, exist_ok=True)

    fig, (l, r) = plt.subplots(1, 2, figsize=(11, 4.2))
    scaling_panel(
        l,
        thr,
        "end_to_end_changes_per_sec",
        "(b) end to end into PostgreSQL, as fast as the publisher takes writes",
        "changes/s (first write to last change in the sink)",
    )
    scaling_panel(
        r,
        cb,
        "changes_per_sec",
        "(c) with a 100 ms sink-side callback (trigger)",
        "changes/s",
    )
    fig.tight_layout()
    out = os.path.join(a.out, "publications-scaling.png")
    fig.savefig(out, dpi=110)
    print("wrote", out)

    fig, (l, r) = plt.subplots(1, 2, figsize=(11, 4.2))
    if lat:
        names = [
            f"{x['system']}\n{x['mode']} x{x['workers']}".replace("aqueduct\n", "Aqueduct\n")
            for x in lat
        ]
        p50 = [fnum(x["p50_ms"]) for x in lat]
        p99 = [fnum(x["p99_ms"]) for x in lat]
        xs = range(len(lat))
        l.bar([i - 0.2 for i in xs], p50, 0.4, label="p50")
        l.bar([i + 0.2 for i in xs], p99, 0.4, label="p99")
        l.set_xticks(list(xs))
        l.set_xticklabels(names, fontsize=7)
        l.set_yscale("log")
        l.set_ylabel("ms from commit to visible in the sink")
        l.axhline(10, color="grey", linestyle="--", linewidth=0.8, label="10 ms target (median)")
        l.set_title(f"publish-to-apply latency at {lat[0]['offered_per_sec']} changes/s", fontsize=10)
        l.legend(fontsize=7)
        l.grid(True, axis="y", alpha=0.3)
    if ov:
        means = defaultdict(list)
        for x in ov:
            means[(x["system"], int(x["subscribers"]))].append(fnum(x["writes_per_sec"]))
        systems = sorted({s for s, _ in means})
        width = 0.8 / max(1, len(systems))
        for j, s in enumerate(systems):
            base = sum(means[(s, 0)]) / len(means[(s, 0)]) if means[(s, 0)] else float("nan")
            subs = sorted(n for t, n in means if t == s)
            vals = [sum(means[(s, n)]) / len(means[(s, n)]) / base for n in subs]
            bars = r.bar([n + (j - (len(systems) - 1) / 2) * width for n in subs], vals, width,
                         label=s.replace("aqueduct", "Aqueduct (weak agents)"))
            for b, n in zip(bars, subs):
                v = sum(means[(s, n)]) / len(means[(s, n)])
                r.annotate(f"{v:,.0f}/s", (b.get_x() + b.get_width() / 2, b.get_height()),
                           ha="center", va="bottom", fontsize=6)
        r.axhline(0.95, color="grey", linestyle="--", linewidth=0.8, label="5% loss target")
        r.set_xticks([0, 1, 2])
        r.set_xlabel("subscribers attached")
        r.set_ylabel("writes/s relative to no subscriber")
        r.set_title("publisher write throughput", fontsize=10)
        r.legend(fontsize=7)
        r.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    out = os.path.join(a.out, "publications-latency.png")
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots the log benchmarks from their JSON results (bench log ... --json FILE).

Usage: python3 bench/plot_log.py [--results DIR] [--out PNG]

Reads, from DIR (default docs/bench-results):
  log-append.json            -> records/s and p50/p99 per backend
  log-append-writers-*.json  -> records/s against writer count (optional)
  log-compaction*.json       -> p50/p99 without and with compaction (optional)
  log-replay.json            -> open+replay records/s, warm and cold (optional)
and writes one PNG (default docs/img/log-bench.png). Needs matplotlib.
"""

import argparse
import glob
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path):
    with open(path) as f:
        return json.load(f)


def append_panels(ax_rate, ax_lat, data):
    rows = data["results"]["backends"]
    names = [r["backend"] for r in rows]
    labels = [
        f'{r["backend"]}\n({r["writers"]} writer{"s" if r["writers"] != 1 else ""})'
        for r in rows
    ]
    rates = [r["records_per_s"] for r in rows]
    colors = ["tab:blue" if n.startswith("aqueduct") else "tab:gray" for n in names]
    colors = [
        "tab:orange" if n == "postgres" else c for n, c in zip(names, colors)
    ]
    bars = ax_rate.bar(range(len(rows)), rates, color=colors)
    for b, v in zip(bars, rates):
        ax_rate.annotate(
            f"{v:,.0f}",
            (b.get_x() + b.get_width() / 2, v),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax_rate.set_yscale("log")
    ax_rate.set_xticks(range(len(rows)))
    ax_rate.set_xticklabels(labels, fontsize=7)
    ax_rate.set_ylabel("records/s (log scale)")
    ax_rate.set_title("Appends of 179-byte values: throughput")

    durable = [r for r in rows if r["backend"] != "aqueduct-never"]
    x = range(len(durable))
    w = 0.38
    p50 = [r["latency"]["p50_ms"] for r in durable]
    p99 = [r["latency"]["p99_ms"] for r in durable]
    ax_lat.bar([i - w / 2 for i in x], p50, w, label="p50")
    ax_lat.bar([i + w / 2 for i in x], p99, w, label="p99")
    ax_lat.set_yscale("log")
    ax_lat.set_xticks(list(x))
    ax_lat.set_xticklabels([r["backend"] for r in durable], fontsize=7)
    ax_lat.set_ylabel("ms to durable (log scale)")
    ax_lat.set_title("Durable backends: append latency")
    ax_lat.legend(fontsize=8)


def writers_panel(ax, files):
    series = {}
    for path in files:
        d = load(path)
        w = d["options"]["writers"]
        for r in d["results"]["backends"]:
            series.setdefault(r["backend"], []).append((w, r["records_per_s"]))
    for name, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent writers")
    ax.set_ylabel("records/s")
    ax.set_title("Durable appends against writer count")
    ax.legend(fontsize=8)


def compaction_panel(ax, files):
    labels, p50, p99 = [], [], []
    for path in files:
        d = load(path)
        w = d["options"]["writers"]
        for phase in ("without", "with"):
            p = d["results"][phase]
            labels.append(f"{w} writers\n{phase}")
            p50.append(p["latency"]["p50_ms"])
            p99.append(p["latency"]["p99_ms"])
    x = range(len(labels))
    w = 0.38
    ax.bar([i - w / 2 for i in x], p50, w, label="p50")
    ax.bar([i + w / 2 for i in x], p99, w, label="p99")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("ms to durable")
    ax.set_title("aqueduct-always with/without background compaction")
    ax.legend(fontsize=8)


def replay_panel(ax, data):
    passes = data["results"]["passes"]
    n = data["options"]["records"]
    labels = [f'{p["cache"]} cache\n{p["total_seconds"]:.2f} s' for p in passes]
    rates = [p["records_per_s"] for p in passes]
    bars = ax.bar(range(len(passes)), rates, color="tab:green")
    for b, v in zip(bars, rates):
        ax.annotate(
            f"{v / 1e6:.2f}M/s",
            (b.get_x() + b.get_width() / 2, v),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.axhline(1_000_000, color="red", linestyle="--", label="target 1M records/s")
    ax.set_xticks(range(len(passes)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.yaxis.set_major_formatter(
        matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1e6:g}M")
    )
    ax.set_ylabel("records/s")
    ax.set_title(f"Open + full replay of {n:,} records")
    ax.legend(fontsize=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "bench-results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img", "log-bench.png"))
    args = ap.parse_args()

    append = os.path.join(args.results, "log-append.json")
    sweep = sorted(
        glob.glob(os.path.join(args.results, "log-append-writers-*.json")),
        key=lambda p: int(re.findall(r"(\d+)\.json$", p)[0]),
    )
    compaction = sorted(
        glob.glob(os.path.join(args.results, "log-compaction*.json")),
        key=lambda p: load(p)["options"]["writers"],
    )
    replay = os.path.join(args.results, "log-replay.json")

    fig, axes = plt.subplots(3, 2, figsize=(13, 14))
    axes = axes.flatten()
    used = 0
    if os.path.exists(append):
        append_panels(axes[0], axes[1], load(append))
        used = 2
    if sweep:
        writers_panel(axes[used], sweep)
        used += 1
    if compaction:
        compaction_panel(axes[used], compaction)
        used += 1
    if os.path.exists(replay):
        replay_panel(axes[used], load(replay))
        used += 1
    if used == 0:
        raise SystemExit(f"no log-*.json results in {args.results}")
    for ax in axes[used:]:
        ax.axis("off")
    m = None
    for path in [append, replay]:
        if os.path.exists(path):
            m = load(path)["machine"]
            break
    if m:
        fig.suptitle(
            f'Aqueduct log benchmarks — {m["cores"]} cores, '
            f'{m["memory_total_bytes"] / 2**30:.0f} GiB, {m["cpu_model"]} '
            "(shared machine: noisy)",
            fontsize=11,
        )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

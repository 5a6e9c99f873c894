#!/usr/bin/env python3
"""Plots the maintained-view benchmarks from their JSON results.

Usage: python3 bench/plot_views.py [--results DIR] [--out PNG]

Reads, from DIR (default docs/bench-results):
  ivm-write.json       -> ns per vote, one per step and 100 per step, per system (uniform votes)
  ivm-write-zipf.json  -> the same with Zipf votes (optional)
  view-read.json       -> keyed reads/s of the view, per id distribution and thread count
  view-read-apis.json  -> the same per read API: the view reader, Session, Session in place (optional)
and writes one PNG (default docs/img/views.png). Needs matplotlib.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLORS = {
    "aqueduct": "tab:blue",
    "aqueduct-keyed": "tab:cyan",
    "differential-dataflow": "tab:green",
    "dbsp": "tab:orange",
}


def load(path):
    with open(path) as f:
        return json.load(f)


def write_panel(ax, data, title):
    results = data["results"]
    systems = [r["system"] for r in results]
    phases = [("single", "1 vote per step"), ("batched", "100 votes per step")]
    w = 0.8 / len(systems)
    for si, r in enumerate(results):
        xs = [pi + (si - (len(systems) - 1) / 2) * w for pi in range(len(phases))]
        ys = [r[p]["mean_ns_per_update"] / 1000 for p, _ in phases]
        bars = ax.bar(xs, ys, w, color=COLORS.get(r["system"]), label=r["system"])
        for bar, v in zip(bars, ys):
            ax.annotate(
                f"{v:.1f}",
                (bar.get_x() + bar.get_width() / 2, v),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.set_yscale("log")
    ax.set_xticks(range(len(phases)))
    ax.set_xticklabels([label for _, label in phases])
    ax.set_ylabel("µs per vote, mean (log scale; lower is better)")
    o = data["options"]
    ax.set_title(
        f"{title}: {o['articles']:,} articles, {o['votes']:,} votes preloaded",
        fontsize=10,
    )
    ax.legend(fontsize=8)


def read_panel(ax, data, title):
    runs = data["results"]["runs"]
    dists = []
    for r in runs:
        if r["distribution"] not in dists:
            dists.append(r["distribution"])
    # One bar per read API (runs before the APIs were compared have none)
    # and thread count.
    series = []
    for r in runs:
        key = (r.get("api", "lookup"), r["threads"])
        if key not in series:
            series.append(key)
    w = 0.8 / len(series)
    for si, (api, t) in enumerate(series):
        xs, ys = [], []
        for di, d in enumerate(dists):
            for r in runs:
                if (r.get("api", "lookup"), r["threads"], r["distribution"]) == (api, t, d):
                    xs.append(di + (si - (len(series) - 1) / 2) * w)
                    ys.append(r["reads_per_s"] / 1e6)
        label = f"{t} thread{'s' if t > 1 else ''}"
        if len({a for a, _ in series}) > 1:
            label = f"{api}, {label}"
        bars = ax.bar(xs, ys, w, label=label)
        for bar, v in zip(bars, ys):
            ax.annotate(
                f"{v:.2f}",
                (bar.get_x() + bar.get_width() / 2, v),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.axhline(5.0, color="tab:red", linestyle="--", linewidth=1)
    ax.annotate(
        "target: 5 M/s per core", (-0.45, 5.0), ha="left", va="bottom", fontsize=8, color="tab:red"
    )
    ax.set_xticks(range(len(dists)))
    ax.set_xticklabels([f"ids {d}" for d in dists])
    ax.set_ylim(0, max(6.0, ax.get_ylim()[1]))
    ax.set_ylabel("million keyed reads/s (all threads)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "bench-results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img", "views.png"))
    args = ap.parse_args()

    panels = []
    uniform = os.path.join(args.results, "ivm-write.json")
    zipf = os.path.join(args.results, "ivm-write-zipf.json")
    read = os.path.join(args.results, "view-read.json")
    if os.path.exists(uniform):
        panels.append(lambda ax: write_panel(ax, load(uniform), "Writes, uniform votes"))
    if os.path.exists(zipf):
        s = load(zipf)["options"]["zipf_s"]
        panels.append(lambda ax: write_panel(ax, load(zipf), f"Writes, Zipf {s} votes"))
    apis = os.path.join(args.results, "view-read-apis.json")
    if os.path.exists(read):
        panels.append(
            lambda ax: read_panel(
                ax, load(read), "Keyed reads of the vote view (ViewRegistry::lookup, in process)"
            )
        )
    if os.path.exists(apis):
        panels.append(
            lambda ax: read_panel(
                ax, load(apis), "The same reads through each API, one run (in process)"
            )
        )
    if not panels:
        raise SystemExit(f"no view benchmark results in {args.results}")
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5.5))
    if len(panels) == 1:
        axes = [axes]
    for ax, draw in zip(axes, panels):
        draw(ax)
    fig.suptitle(
        "Noria's vote view: one write through join + count (Aqueduct, Differential Dataflow, "
        "DBSP; one worker each), and keyed reads (2 vCPUs, shared machine: noisy)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

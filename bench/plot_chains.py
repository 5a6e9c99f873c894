#!/usr/bin/env python3
"""Plots the chains benchmark from its JSON results.

Usage: python3 bench/plot_chains.py [--local FILE] [--geo FILE] [--out FILE]

Reads the results of `bench chains --json ...` without simulated
datacenters (default docs/bench-results/chains-local.json) and with them
(default docs/bench-results/chains-geo.json) and writes a PNG (default
docs/img/chains.png): chains/s per workload for piecewise, the
distributed fallback and PostgreSQL SERIALIZABLE, and the first-hop and
completion latency (p50) of each. Needs matplotlib.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["piecewise", "distributed", "postgres"]
COLORS = {"piecewise": "#1f77b4", "distributed": "#ff7f0e", "postgres": "#7f7f7f"}


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["results"]


def runs(result):
    out = {}
    for r in result["runs"]:
        out[(r["workload"], r["mode"])] = r
    return out


def bars(ax, result, title, key, ylabel, log=False):
    rs = runs(result)
    workloads = []
    for r in result["runs"]:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        xs, ys = [], []
        for j, w in enumerate(workloads):
            r = rs.get((w, mode))
            if r is None:
                continue
            xs.append(j + (i - 1) * width)
            ys.append(key(r))
        if xs:
            ax.bar(xs, ys, width, label=mode, color=COLORS[mode])
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, rotation=20, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--local", default=os.path.join(ROOT, "docs/bench-results/chains-local.json"))
    p.add_argument("--geo", default=os.path.join(ROOT, "docs/bench-results/chains-geo.json"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs/img/chains.png"))
    a = p.parse_args()
    results = [(name, load(path)) for name, path in (("one datacenter", a.local), ("simulated datacenters", a.geo))]
    results = [(n, r) for n, r in results if r is not None]
    fig, axes = plt.subplots(len(results), 3, figsize=(15, 4.2 * len(results)), squeeze=False)
    for row, (name, r) in enumerate(results):
        bars(axes[row][0], r, f"throughput, {name}", lambda x: x["chains_per_s"], "chains/s")
        bars(axes[row][1], r, f"first hop p50, {name}", lambda x: x["first_hop"]["p50_ms"], "ms", log=True)
        bars(axes[row][2], r, f"completion p50, {name}", lambda x: x["completion"]["p50_ms"], "ms", log=True)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

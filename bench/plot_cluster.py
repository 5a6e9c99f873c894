#!/usr/bin/env python3
"""Plots the three-node cluster benchmark (etcd, ZooKeeper, Aqueduct).

Usage: python3 bench/plot_cluster.py [--result FILE ...] [--out FILE]

Reads one or more FILEs (default docs/bench-results/cluster.json), each
written by `bench/cluster/run.sh FILE`, and writes a PNG (default
docs/img/cluster.png): writes/s and local reads/s of each system, one group
of bars per file (its client count), with write p99 latency noted on each
write bar. Needs matplotlib.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEMS = ["etcd", "zookeeper", "aqueduct"]
COLORS = {"etcd": "#4c72b0", "zookeeper": "#dd8452", "aqueduct": "#55a868"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--result",
        nargs="+",
        default=[os.path.join(ROOT, "docs/bench-results/cluster.json")],
    )
    p.add_argument("--out", default=os.path.join(ROOT, "docs/img/cluster.png"))
    a = p.parse_args()
    reports = []
    for path in a.result:
        with open(path) as f:
            reports.append(json.load(f))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(SYSTEMS)
    for ax, mode, title in [
        (axes[0], "write", "writes/s (179-byte values, fsync)"),
        (axes[1], "read", "local reads/s, spread over the 3 nodes"),
    ]:
        for s_i, system in enumerate(SYSTEMS):
            xs, ys, notes = [], [], []
            for r_i, report in enumerate(reports):
                for r in report["results"]:
                    if r["system"] == system and r["mode"] == mode:
                        xs.append(r_i + (s_i - 1) * width)
                        ys.append(r["ops_per_s"])
                        notes.append(f'p99 {r["p99_ms"]:.0f} ms' if mode == "write" else "")
            bars = ax.bar(xs, ys, width, label=system, color=COLORS[system])
            for bar, note in zip(bars, notes):
                ax.annotate(
                    f"{bar.get_height():,.0f}\n{note}".strip(),
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        ax.set_xticks(range(len(reports)))
        ax.set_xticklabels([f'{r["settings"]["clients"]} clients' for r in reports])
        ax.set_title(title)
        ax.margins(y=0.2)
    axes[0].legend()
    m = reports[0]["machine"]
    fig.suptitle(
        f'Three nodes on one machine ({m["cores"]} cores, loopback): '
        f"etcd {reports[0]['versions']['etcd']}, ZooKeeper "
        f"{reports[0]['versions']['zookeeper']}, Aqueduct",
        fontsize=9,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

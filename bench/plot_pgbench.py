#!/usr/bin/env python3
"""Plots pgbench against Aqueduct and PostgreSQL (bench/pgbench/sweep --json FILE).

Usage: python3 bench/plot_pgbench.py [--json FILE] [--out PNG]

Reads FILE (default docs/bench-results/pgbench-scale10.json) and writes
one PNG (default docs/img/pgbench.png): tps (top) and average latency
(bottom) by client count, one column per workload (tpcb-like,
select-only), one line per peer. Failed transactions, when there are any,
are written beside their point. Needs matplotlib.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STYLE = {
    "postgres": ("tab:orange", "o", "PostgreSQL 15 (read committed)"),
    "aqueduct": ("tab:blue", "s", "Aqueduct (serializable, its default)"),
    "aqueduct-rc": ("tab:cyan", "^", "Aqueduct (read committed)"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=os.path.join(ROOT, "docs/bench-results/pgbench-scale10.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/img/pgbench.png"))
    args = ap.parse_args()
    with open(args.json) as f:
        data = json.load(f)
    runs = data["runs"]
    workloads = data["options"]["workloads"]
    peers = [p for p in data["options"]["peers"] if any(r["peer"] == p for r in runs)]
    fig, axes = plt.subplots(2, len(workloads), figsize=(5.5 * len(workloads), 7.5), squeeze=False)
    for wi, wl in enumerate(workloads):
        for peer in peers:
            color, marker, label = STYLE.get(peer, (None, "x", peer))
            pts = sorted(
                (r for r in runs if r["workload"] == wl and r["peer"] == peer and r["tps"]),
                key=lambda r: r["clients"],
            )
            if not pts:
                continue
            xs = [r["clients"] for r in pts]
            axes[0][wi].plot(xs, [r["tps"] for r in pts], marker=marker, color=color, label=label)
            axes[1][wi].plot(xs, [r["latency_ms"] for r in pts], marker=marker, color=color, label=label)
            for r in pts:
                if r.get("failed") and r.get("transactions"):
                    share = 100 * r["failed"] / (r["transactions"] + r["failed"])
                    axes[0][wi].annotate(
                        f"{share:.1f}% failed",
                        (r["clients"], r["tps"]),
                        textcoords="offset points",
                        xytext=(-62, -14),
                        fontsize=7,
                        color=color,
                    )
        clients = data["options"]["clients"]
        for row, ylabel in ((0, "transactions/s"), (1, "average latency (ms)")):
            ax = axes[row][wi]
            ax.set_xticks(clients)
            ax.set_xlabel("clients (pgbench -c, -j %d)" % data["options"]["threads"])
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        axes[0][wi].set_title(f"{wl}, scale {data['options']['scale']}, {data['options']['seconds']} s per point")
    axes[0][0].legend(fontsize=8)
    m = data["machine"]
    fig.suptitle(
        f"pgbench: Aqueduct and PostgreSQL 15 side by side "
        f"({m['cores']} cores, {m['memory_gib']:.0f} GiB, fsync on for both)",
        fontsize=11,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

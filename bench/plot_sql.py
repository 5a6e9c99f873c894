#!/usr/bin/env python3
"""Plots the server benchmarks from their JSON results (bench sql point --json FILE).

Usage: python3 bench/plot_sql.py [--results DIR] [--out PNG]

Reads, from DIR (default docs/bench-results):
  sql-point.json           -> ops/s, p50/p99 and CPU per statement, per backend and workload
  sql-point-conns-*.json   -> ops/s against the number of connections (optional)
and writes one PNG (default docs/img/sql-point.png). Needs matplotlib.
"""

import argparse
import glob
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLORS = {"aqueduct": "tab:blue", "postgres": "tab:orange"}
WORKLOADS = ["point-reads", "inserts"]


def load(path):
    with open(path) as f:
        return json.load(f)


def by_key(data):
    return {(r["workload"], r["backend"]): r for r in data["results"]["results"]}


def backends_of(data):
    seen = []
    for r in data["results"]["results"]:
        if r["backend"] not in seen:
            seen.append(r["backend"])
    return seen


def throughput_panel(ax, data):
    rows = by_key(data)
    backends = backends_of(data)
    w = 0.8 / len(backends)
    for bi, b in enumerate(backends):
        xs, ys, lo, hi = [], [], [], []
        for wi, wl in enumerate(WORKLOADS):
            r = rows.get((wl, b))
            if not r:
                continue
            xs.append(wi + (bi - (len(backends) - 1) / 2) * w)
            ys.append(r["ops_per_s"])
            lo.append(r["ops_per_s"] - r["min_round_ops_per_s"])
            hi.append(r["max_round_ops_per_s"] - r["ops_per_s"])
        bars = ax.bar(xs, ys, w, yerr=[lo, hi], capsize=4, color=COLORS.get(b), label=b)
        for bar, v in zip(bars, ys):
            ax.annotate(
                f"{v:,.0f}",
                (bar.get_x() + bar.get_width() / 2, v / 2),
                ha="center",
                va="center",
                fontsize=9,
                color="white",
            )
    ratios = {c["workload"]: c["ops_per_s_ratio"] for c in data["results"]["aqueduct_vs_postgres"]}
    ax.set_xticks(range(len(WORKLOADS)))
    ax.set_xticklabels(
        [f"{wl}\naqueduct/postgres {ratios[wl]:.2f}x" if wl in ratios else wl for wl in WORKLOADS],
        fontsize=8,
    )
    ax.set_ylabel("statements/s (bars: round min-max)")
    n = data["options"]["connections"]
    ax.set_title(f"Throughput, {n} connections, closed loop")
    ax.legend(fontsize=8)


def latency_panel(ax, data):
    rows = by_key(data)
    labels, p50, p99, colors = [], [], [], []
    for wl in WORKLOADS:
        for b in backends_of(data):
            r = rows.get((wl, b))
            if not r:
                continue
            labels.append(f"{wl}\n{b}")
            p50.append(r["latency"]["p50_ms"])
            p99.append(r["latency"]["p99_ms"])
            colors.append(COLORS.get(b))
    x = range(len(labels))
    w = 0.38
    ax.bar([i - w / 2 for i in x], p50, w, color=colors, alpha=0.55, label="p50")
    ax.bar([i + w / 2 for i in x], p99, w, color=colors, label="p99")
    for i, (a, b) in enumerate(zip(p50, p99)):
        ax.annotate(f"{a:.2f}", (i - w / 2, a), ha="center", va="bottom", fontsize=7)
        ax.annotate(f"{b:.2f}", (i + w / 2, b), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("ms per statement (light: p50, dark: p99)")
    ax.set_title("Latency, client-side, round trip included")


def cpu_panel(ax, data):
    rows = by_key(data)
    labels, server, client = [], [], []
    for wl in WORKLOADS:
        for b in backends_of(data):
            r = rows.get((wl, b))
            if not r:
                continue
            labels.append(f"{wl}\n{b}")
            server.append(r["server_cpu_us_per_op"])
            client.append(r["client_cpu_us_per_op"])
    x = list(range(len(labels)))
    ax.bar(x, server, 0.6, color="tab:red", label="server process(es)")
    ax.bar(x, client, 0.6, bottom=server, color="tab:gray", label="client (bench)")
    for i, (s, c) in enumerate(zip(server, client)):
        ax.annotate(f"{s:.0f}", (i, s / 2), ha="center", va="center", fontsize=8, color="white")
        ax.annotate(f"{c:.0f}", (i, s + c / 2), ha="center", va="center", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("CPU microseconds per statement")
    ax.set_title("CPU per statement (loopback softirq work included)")
    ax.legend(fontsize=8)


def sweep_panel(ax, files):
    series = {}
    for path in files:
        d = load(path)
        n = d["options"]["connections"]
        for r in d["results"]["results"]:
            series.setdefault((r["workload"], r["backend"]), []).append((n, r["ops_per_s"]))
    for (wl, b), pts in sorted(series.items()):
        pts.sort()
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            color=COLORS.get(b),
            linestyle="-" if wl == "point-reads" else "--",
            label=f"{wl} {b}",
        )
    ax.set_xscale("log", base=2)
    ticks = sorted({p[0] for pts in series.values() for p in pts})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_yscale("log")
    ax.set_xlabel("client connections (closed loop)")
    ax.set_ylabel("statements/s")
    ax.set_title("Throughput against connections (2 rounds x 3 s each)")
    ax.legend(fontsize=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "bench-results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img", "sql-point.png"))
    args = ap.parse_args()

    main_file = os.path.join(args.results, "sql-point.json")
    if not os.path.exists(main_file):
        raise SystemExit(f"no sql-point.json in {args.results}")
    data = load(main_file)
    sweep = sorted(
        glob.glob(os.path.join(args.results, "sql-point-conns-*.json")),
        key=lambda p: int(re.findall(r"(\d+)\.json$", p)[0]),
    )

    fig, axes = plt.subplots(2, 2, figsize=(13, 10))
    axes = axes.flatten()
    throughput_panel(axes[0], data)
    latency_panel(axes[1], data)
    cpu_panel(axes[2], data)
    if sweep:
        sweep_panel(axes[3], sweep)
    else:
        axes[3].axis("off")
    m = data["machine"]
    o = data["options"]
    fig.suptitle(
        f"Aqueduct server (--fsync {o['fsync']}) vs PostgreSQL over the wire — "
        f"{m['cores']} cores shared by server and clients, {m['cpu_model']}, "
        f"{o['rounds']} rounds x {o['seconds']:g} s (shared machine: noisy)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

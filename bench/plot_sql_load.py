#!/usr/bin/env python3
"""Plots bulk loading, memory per row and restart against the row count
from `bench sql load --json FILE` results.

Usage: python3 bench/plot_sql_load.py [--results DIR] [--out PNG]

Reads every DIR/sql-load-*.json (default docs/bench-results), one run per
row count, and writes one PNG (default docs/img/sql-load.png) with three
panels: rows/s of each load, bytes per row, and Aqueduct's restarts (after
each load) to the first read. Needs matplotlib.
"""

import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLORS = {"aqueduct": "tab:blue", "postgres": "tab:orange"}


def runs(results_dir):
    out = []
    for path in sorted(glob.glob(os.path.join(results_dir, "sql-load-*.json"))):
        with open(path) as f:
            report = json.load(f)
        out.append((report["options"]["rows"], report["results"]["results"]))
    out.sort(key=lambda r: r[0])
    return out


def series(data, backend, field):
    xs, ys = [], []
    for rows, results in data:
        for r in results:
            if r["backend"] == backend and r.get(field) is not None:
                xs.append(rows)
                ys.append(r[field])
    return xs, ys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "bench-results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img", "sql-load.png"))
    args = ap.parse_args()
    data = runs(args.results)
    if not data:
        raise SystemExit(f"no sql-load-*.json in {args.results}")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))

    def lines(ax, fields):
        for backend, color in COLORS.items():
            for field, label, style in fields:
                xs, ys = series(data, backend, field)
                if xs:
                    ax.plot(xs, ys, style, marker="o", color=color, label=f"{backend} {label}")

    ax = axes[0]
    lines(ax, [
        ("copy_narrow_rows_per_s", "COPY narrow", "-"),
        ("insert_indexed_rows_per_s", "multi-row INSERT (indexed)", "--"),
        ("copy_mixed_rows_per_s", "COPY mixed", ":"),
    ])
    ax.set_xscale("log")
    ax.set_xlabel("rows per table")
    ax.set_ylabel("rows/s")
    ax.set_title("Bulk load (durable)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)

    ax = axes[1]
    lines(ax, [
        ("narrow_bytes_per_row", "narrow (3 bigint)", "-"),
        ("mixed_bytes_per_row", "mixed (text, numeric, timestamp)", "--"),
        ("indexed_bytes_per_row", "indexed (secondary index, view)", ":"),
    ])
    ax.axhline(100, color="gray", linewidth=0.8, linestyle="-.", label="target: 100 B/row (narrow)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows per table")
    ax.set_ylabel("bytes per row")
    ax.set_title("Memory per row (Aqueduct: resident; PostgreSQL: heap + indexes)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)

    ax = axes[2]
    xs, ys = [], []
    for _, results in data:
        for r in results:
            for point in r.get("restarts", []):
                xs.append(point["rows"])
                ys.append(point["seconds"])
    pairs = sorted(zip(xs, ys))
    ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o",
            color=COLORS["aqueduct"], label="aqueduct")
    ax.axhline(10, color="gray", linewidth=0.8, linestyle="-.", label="target: 10 s at 10M rows")
    ax.set_xlabel("rows in all tables")
    ax.set_ylabel("seconds from start to the first read")
    ax.set_title("Restart")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)

    fig.tight_layout()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

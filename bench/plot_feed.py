#!/usr/bin/env python3
"""Plots the change-feed benchmark from its JSON result.

Usage: python3 bench/plot_feed.py [--results FILE] [--out PNG]

Reads FILE (default docs/bench-results/feed-throughput.json, written by
`bench feed --json ...`) and writes one PNG (default
docs/img/feed-throughput.png) with two panels:
  left:  changes/s delivered to one consumer, per path (Aqueduct in process
         live / from memory / from the log, over HTTP from memory / from the
         log; PostgreSQL's logical decoding of one slot);
  right: writes/s with 0, 1 and 8 consumers, Aqueduct and PostgreSQL, each
         relative to its own run with no consumer.
Needs matplotlib.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLORS = {"aqueduct": "tab:blue", "postgres": "tab:orange"}
LABELS = {
    ("aqueduct", "live"): "Aqueduct\nin process\nlive (write-bound)",
    ("aqueduct", "memory"): "Aqueduct\nin process\nfrom memory",
    ("aqueduct", "log"): "Aqueduct\nin process\nfrom the log",
    ("aqueduct", "http-memory"): "Aqueduct\nHTTP NDJSON\nfrom memory",
    ("aqueduct", "http-log"): "Aqueduct\nHTTP NDJSON\nfrom the log",
    ("aqueduct", "mirror-http"): "Aqueduct mirror\n(HTTP, from the log)\n1,000,000 behind",
    ("postgres", "decode"): "PostgreSQL 15\ntest_decoding\npg_recvlogical",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--results",
        default=os.path.join(ROOT, "docs/bench-results/feed-throughput.json"),
    )
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/img/feed-throughput.png"))
    a = ap.parse_args()
    with open(a.results) as f:
        data = json.load(f)
    res = data["results"]

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), gridspec_kw={"width_ratios": [3, 2]})

    ds = res["deliveries"]
    xs = range(len(ds))
    ys = [d["changes_per_s"] for d in ds]
    bars = left.bar(
        xs,
        ys,
        color=[COLORS.get(d["system"], "gray") for d in ds],
    )
    for bar, v in zip(bars, ys):
        left.annotate(
            f"{v / 1000:,.0f} k",
            (bar.get_x() + bar.get_width() / 2, v),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    left.set_xticks(list(xs))
    left.set_xticklabels([LABELS.get((d["system"], d["path"]), d["path"]) for d in ds], fontsize=7)
    left.set_yscale("log")
    left.set_ylabel("row changes/s to one consumer (log scale)")
    o = data["options"]
    left.set_title(
        f"Delivery: {o['changes']:,} one-row transactions ({o['http_changes']:,} over HTTP)",
        fontsize=10,
    )

    summary = res["summary"]
    systems = [s for s in ["aqueduct", "postgres"] if any(r["system"] == s for r in summary)]
    ks = sorted({r["consumers"] for r in summary})
    w = 0.8 / max(1, len(systems))
    for si, system in enumerate(systems):
        rows = {r["consumers"]: r for r in summary if r["system"] == system}
        px = [ki + (si - (len(systems) - 1) / 2) * w for ki in range(len(ks))]
        py = [rows[k]["ratio"] if k in rows else 0 for k in ks]
        bars = right.bar(px, py, w, color=COLORS[system], label=system)
        for bar, k in zip(bars, ks):
            if k in rows:
                r = rows[k]
                right.annotate(
                    f"{r['writes_per_s'] / 1000:,.1f} k/s\n{r['ratio']:.2f}x",
                    (bar.get_x() + bar.get_width() / 2, r["ratio"]),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    right.axhline(0.95, color="gray", linestyle="--", linewidth=0.8)
    right.annotate("target: under 5% loss", (len(ks) - 0.6, 0.955), fontsize=7, color="gray", ha="right")
    right.set_xticks(range(len(ks)))
    right.set_xticklabels([f"{k} consumers" for k in ks])
    right.set_ylim(0, 1.25)
    right.set_ylabel("writes/s against 0 consumers (same system)")
    right.set_title(
        f"Writes ({o['writers']} writers, one-row autocommit) while consumers follow",
        fontsize=10,
    )
    right.legend(fontsize=8, loc="upper right")

    m = data["machine"]
    fig.suptitle(
        f"Change feed: {m['cores']} cores, {m['memory_total_bytes'] / 2**30:.0f} GiB, durability off",
        fontsize=11,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

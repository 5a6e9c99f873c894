#!/usr/bin/env python3
"""Plots `bench view partial` (partial state under memory limits) from its JSON result.

Usage: python3 bench/plot_partial.py [--json FILE] [--out-dir DIR]

Reads FILE (default docs/bench-results/view-partial.json) and writes to DIR
(default docs/img):
  partial-throughput.png  reads/s, hit rate, read latency and memory per
                          memory limit and write fraction
  partial-newview.png     writes/s per interval while a new view is added
                          (only when the run had the new-view phase)
Needs matplotlib.
"""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024 * 1024


def configs_of(runs):
    out = []
    for r in runs:
        if r["config"] not in out:
            out.append(r["config"])
    return out


def label_of(config, runs):
    for r in runs:
        if r["config"] == config and r["limit_percent"] is not None:
            return f"{config}\n({r['memory_limit_bytes'] / MIB:.1f} MiB)"
    return config


def grouped(ax, runs, value, fmt, log=False):
    """Bars per configuration, one per write fraction; returns the bars' x per (config, w)."""
    configs = configs_of(runs)
    fractions = sorted({r["write_fraction"] for r in runs})
    w = 0.8 / len(fractions)
    where = {}
    for fi, f in enumerate(fractions):
        xs, ys = [], []
        for ci, c in enumerate(configs):
            for r in runs:
                if r["config"] == c and r["write_fraction"] == f:
                    x = ci + (fi - (len(fractions) - 1) / 2) * w
                    xs.append(x)
                    ys.append(value(r))
                    where[(c, f)] = x
        bars = ax.bar(xs, ys, w, label=f"{f * 100:g}% writes")
        for bar, v in zip(bars, ys):
            ax.annotate(
                fmt(v),
                (bar.get_x() + bar.get_width() / 2, v),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    if log:
        ax.set_yscale("log")
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([label_of(c, runs) for c in configs], fontsize=8)
    return where


def throughput_panel(ax, runs):
    grouped(ax, runs, lambda r: r["reads_per_s"] / 1e6, lambda v: f"{v:.3g}", log=True)
    # The target: at 25% of the memory, 80% of the all-keys throughput.
    base = {r["write_fraction"]: r["reads_per_s"] for r in runs if r["config"] == "all keys"}
    for f, b in sorted(base.items()):
        ax.axhline(0.8 * b / 1e6, color="tab:red", linestyle=":", linewidth=0.8)
    if base:
        ax.annotate(
            "dotted: 80% of all keys\n(target at 25% memory)",
            (len(configs_of(runs)) - 0.55, 0.8 * max(base.values()) / 1e6),
            ha="right",
            va="bottom",
            fontsize=7,
            color="tab:red",
        )
    ax.set_ylabel("million reads/s, all threads (log scale)")
    ax.set_title("Read throughput", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")


def hit_panel(ax, runs):
    grouped(ax, runs, lambda r: r["hit_rate"] * 100, lambda v: f"{v:.1f}")
    lo = min(r["hit_rate"] * 100 for r in runs)
    ax.set_ylim(max(0, lo - 10), 101)
    ax.set_ylabel("hit rate, % of reads")
    ax.set_title("Reads answered without an upquery", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")


def latency_panel(ax, runs):
    configs = configs_of(runs)
    fractions = sorted({r["write_fraction"] for r in runs})
    w = 0.8 / len(fractions)
    for fi, f in enumerate(fractions):
        xs, p50, p99 = [], [], []
        for ci, c in enumerate(configs):
            for r in runs:
                if r["config"] == c and r["write_fraction"] == f:
                    xs.append(ci + (fi - (len(fractions) - 1) / 2) * w)
                    p50.append(r["read_p50_ns"] / 1000)
                    p99.append(r["read_p99_ns"] / 1000)
        color = f"C{fi}"
        ax.scatter(xs, p50, marker="o", color=color, label=f"p50, {f * 100:g}% writes")
        ax.scatter(xs, p99, marker="^", color=color, label=f"p99, {f * 100:g}% writes")
        for x, a, b in zip(xs, p50, p99):
            ax.plot([x, x], [a, b], color=color, linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([label_of(c, runs) for c in configs], fontsize=8)
    ax.set_ylabel("µs per read (log scale; one read in 16 timed)")
    ax.set_title("Read latency, hits and misses", fontsize=10)
    ax.legend(fontsize=7)


def memory_panel(ax, runs):
    where = grouped(ax, runs, lambda r: r["state_bytes_end"] / MIB, lambda v: f"{v:.1f}")
    for r in runs:
        x = where.get((r["config"], r["write_fraction"]))
        if x is None:
            continue
        ax.scatter([x], [r["rss_bytes_end"] / MIB], marker="_", s=200, color="black")
        if r["memory_limit_bytes"]:
            ax.scatter([x], [r["memory_limit_bytes"] / MIB], marker="_", s=200, color="tab:red")
    ax.scatter([], [], marker="_", color="black", label="process RSS (with the tables)")
    ax.scatter([], [], marker="_", color="tab:red", label="memory limit")
    ax.set_yscale("log")
    ax.set_ylabel("MiB (log scale)")
    ax.set_title("View and operator state at the end of the run", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")


def throughput_figure(data, out):
    runs = data["results"]["runs"]
    o = data["options"]
    load = data["results"]["load"]
    m = data.get("machine", {})
    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    throughput_panel(axes[0][0], runs)
    hit_panel(axes[0][1], runs)
    latency_panel(axes[1][0], runs)
    memory_panel(axes[1][1], runs)
    fig.suptitle(
        f"Partial state, Noria's vote view: {load['articles']:,} articles, {load['votes']:,} votes, "
        f"Zipf {o['zipf_s']} reads and votes, {o['threads']} threads (closed loop), "
        f"{o['seconds']:g} s per run\n"
        "limits are % of the state with every key held just before "
        f"({load['full_state_bytes'] / MIB:.1f} MiB after loading; votes written grow it); "
        f"{m.get('cores', '?')} vCPUs, {m.get('memory_total_bytes', 0) / 2**30:.0f} GiB "
        "(shared machine: noisy)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def newview_panel(ax, nv):
    ts = [p[0] for p in nv["timeline"]]
    rates = [p[1] / 1000 for p in nv["timeline"]]
    ax.step(ts, rates, where="pre", color="tab:blue", linewidth=1, label="writes/s per interval")
    before = nv["writes_before_mean_per_s"] / 1000
    ax.axhline(before, color="tab:gray", linestyle="--", linewidth=0.8, label="mean before")
    ax.axhline(0.9 * before, color="tab:red", linestyle=":", linewidth=0.8, label="90% of it (target)")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.axvline(nv["first_answer_ms"] / 1000, color="tab:green", linewidth=0.8)
    ax.axvline(nv["reads_done_s"], color="tab:orange", linewidth=0.8)
    top = max(rates + [before]) * 1.15
    ax.set_ylim(0, top)
    if nv["reads_done_s"] < 0.15:
        # Too close together to label apart: one label for all three.
        ax.annotate(
            f"CREATE VIEW, first read, {nv['next_reads']['count']} more first reads: "
            f"{nv['reads_done_s'] * 1000:.0f} ms in all",
            (0, top * 0.97),
            fontsize=7,
            ha="right",
            va="top",
            rotation=90,
        )
    else:
        ax.annotate("CREATE VIEW", (0, top * 0.97), fontsize=7, ha="right", va="top", rotation=90)
        ax.annotate(
            "first read answered",
            (nv["first_answer_ms"] / 1000, top * 0.97),
            fontsize=7,
            ha="left",
            va="top",
            rotation=90,
            color="tab:green",
        )
        ax.annotate(
            f"{nv['next_reads']['count']} more first reads done",
            (nv["reads_done_s"], top * 0.97),
            fontsize=7,
            ha="left",
            va="top",
            rotation=90,
            color="tab:orange",
        )
    nr = nv["next_reads"]
    text = (
        f"CREATE VIEW {nv['create_view_ms']:.2f} ms\n"
        f"first read (article {nv['first_read_id']}, {nv['first_read_votes'] or 0:,} votes) "
        f"{nv['first_read_ms']:.2f} ms\n"
        f"next {nr['count']} first reads: p50 {nr['p50_ms']:.2f} ms, p99 {nr['p99_ms']:.2f} ms\n"
        f"writes/s: before {nv['writes_before_mean_per_s']:,.0f}, slowest after "
        f"{nv['writes_after_min_per_s']:,.0f} (dip {nv['dip_percent']:.0f}%)"
    )
    ax.text(
        0.99,
        0.03,
        text,
        transform=ax.transAxes,
        fontsize=7,
        ha="right",
        va="bottom",
        bbox=dict(boxstyle="round", facecolor="white", alpha=0.85),
    )
    ax.set_xlabel("s since CREATE VIEW")
    ax.set_ylabel(f"thousand inserts/s (per {nv['interval_ms']} ms)")
    ax.set_title(
        f"Partial state {'on' if nv['partial'] else 'off'}: a new view over "
        f"{nv['votes']:,} votes, {nv['articles']:,} articles",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="lower left")


def newview_figure(data, out):
    res = data["results"]
    views = [v for v in (res.get("new_view"), res.get("new_view_partial_off")) if v]
    if not views:
        print("no new-view phase in the results: skipping the new-view plot")
        return
    fig, axes = plt.subplots(1, len(views), figsize=(8 * len(views), 5))
    if len(views) == 1:
        axes = [axes]
    for ax, nv in zip(axes, views):
        newview_panel(ax, nv)
    fig.suptitle(
        "Adding a view while one writer inserts votes (closed loop)\n"
        "the writer, the thread reading the new view and the dataflow share the machine's cores",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--json", default=os.path.join(ROOT, "docs", "bench-results", "view-partial.json")
    )
    ap.add_argument(
        "--newview-json",
        help="a run with the new-view phase, when --json was run with --skip-newview "
        "[default: --json]",
    )
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs", "img"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    with open(args.json) as f:
        data = json.load(f)
    if data["results"].get("load"):
        throughput_figure(data, os.path.join(args.out_dir, "partial-throughput.png"))
    with open(args.newview_json or args.json) as f:
        newview = json.load(f)
    if newview["results"].get("new_view"):
        newview_figure(newview, os.path.join(args.out_dir, "partial-newview.png"))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots latency against offered load from an open-loop sweep
(bench vote --json FILE, bench news --json FILE), the way Noria's paper
shows its vote and Lobsters results: one line per backend, the median solid
and the 95th percentile dashed, offered load on the x-axis.

Usage: python3 bench/plot_load.py --json FILE --out PNG [--kinds read,write]
       [--title TEXT] [--bound-ms 5]

Each operation kind named in --kinds gets its own panel (default: every
kind in the file; for news that is each page type, so pass --kinds all to
plot page views as a whole). Points that did not reach 95% of the offered
load are drawn hollow: there the system was saturated. Needs matplotlib.
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = [
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
]
# A point counts as keeping up when it achieved this share of its offered load.
ACHIEVED_SHARE = 0.95


def kind_of(outcome, name):
    if name == "all":
        return outcome["all"]
    for k in outcome["kinds"]:
        if k["kind"] == name:
            return k
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kinds", default=None, help="comma-separated operation kinds, or all")
    ap.add_argument("--title", default=None)
    ap.add_argument("--bound-ms", type=float, default=None, help="draw this latency bound")
    args = ap.parse_args()

    with open(args.json) as f:
        data = json.load(f)
    results = data["results"]
    backends = results["backends"]
    if args.kinds:
        kinds = args.kinds.split(",")
    else:
        kinds = [k["kind"] for k in backends[0]["runs"][0]["outcome"]["kinds"]]

    fig, axes = plt.subplots(1, len(kinds), figsize=(6.5 * len(kinds), 4.8), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for i, b in enumerate(backends):
            color = COLORS[i % len(COLORS)]
            pts = []
            for run in b["runs"]:
                offered = run["outcome"].get("offered_ops_per_sec")
                k = kind_of(run["outcome"], kind)
                if offered is None or k is None or k["ops"] == 0:
                    continue
                kept_up = run["outcome"]["achieved_ops_per_sec"] >= ACHIEVED_SHARE * offered
                pts.append((offered, k["latency"]["p50_ms"], k["latency"]["p95_ms"], kept_up))
            if not pts:
                continue
            pts.sort()
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1] for p in pts], "-", color=color, label=f"{b['backend']} p50")
            ax.plot(xs, [p[2] for p in pts], "--", color=color, label=f"{b['backend']} p95")
            for x, p50, p95, kept_up in pts:
                face = color if kept_up else "none"
                ax.plot([x, x], [p50, p95], "o", color=color, markerfacecolor=face, markersize=4)
        if args.bound_ms:
            ax.axhline(args.bound_ms, color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered load (operations/s)")
        ax.set_ylabel("latency (ms)")
        ax.set_title(kind)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    machine = data.get("machine", {})
    title = args.title or f"{data.get('benchmark', '')}: latency against offered load"
    fig.suptitle(
        f"{title}\n{machine.get('cores', '?')} cores, {machine.get('cpu_model', '')}; "
        "hollow markers: below 95% of the offered load"
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=110, bbox_inches="tight")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots `detllm bench --json FILE` results (docs/perf.md, "detllm bench").

    .venv/bin/python scripts/plot_bench.py RESULT.json [MORE.json ...] [--out-dir docs/img]
        [--prefix bench] [--share 100]

Writes, for the results found:
  <prefix>_throughput_vs_share.png  offline output tokens/s against the deterministic share,
                                    one line per mode (and per file when files differ in
                                    backend or model);
  <prefix>_latency_vs_rate.png      online TTFT, TPOT and end-to-end latency (p50 solid, p99
                                    dashed, all requests) against the arrival rate, one line per
                                    mode, at one deterministic share (--share; default: the
                                    largest present).
Every figure's title names the conditions (model, backend, workload, commit) of its data.
Needs matplotlib (scripts/requirements.txt).
"""
import argparse
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    """All results of all files, each with a 'series' label: mode, plus the file's backend and
    model when the files do not all share them."""
    files = []
    for p in paths:
        with open(p) as f:
            j = json.load(f)
        if j.get("tool") != "detllm bench" or "results" not in j:
            sys.exit(f"{p}: not a detllm bench --json file")
        files.append((p, j))
    keys = {(j["conditions"]["backend"], j["conditions"]["model"]) for _, j in files}
    results = []
    for p, j in files:
        c = j["conditions"]
        for r in j["results"]:
            label = r["mode"]
            if len(keys) > 1:
                label += f" ({c['backend']}, {c['model']})"
            results.append(dict(r, series=label))
    return files, results


def conditions_line(files):
    parts = set()
    for _, j in files:
        c = j["conditions"]
        parts.add(f"{c['model']} on {c['backend']}, {c['workload']} x{c['n_requests']}, "
                  f"commit {c['git_commit']}")
    return "; ".join(sorted(parts))


def plot_throughput(results, files, out):
    series = defaultdict(list)
    for r in results:
        if r["kind"] == "offline":
            series[r["series"]].append((r["det_share"], r["output_tokens_per_s"]))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xlabel("deterministic requests (%)")
    ax.set_ylabel("output tokens/s (offline)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Offline throughput vs deterministic share\n" + conditions_line(files),
                 fontsize=9)
    fig.text(0.01, 0.01, "modes apply engine-wide: the share changes which requests are "
             "marked deterministic, not their kernels", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_latency(results, files, out, share):
    online = [r for r in results if r["kind"] == "online"]
    if not online:
        return None
    if share is None:
        share = max(r["det_share"] for r in online)
    online = [r for r in online if r["det_share"] == share]
    if not online:
        sys.exit(f"no online result at deterministic share {share}")
    metrics = [("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)"), ("e2e", "end-to-end (ms)")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    series = defaultdict(list)
    for r in online:
        series[r["series"]].append(r)
    for ax, (key, title) in zip(axes, metrics):
        for i, (name, rs) in enumerate(sorted(series.items())):
            rs.sort(key=lambda r: r["rate"])
            rates = [r["rate"] for r in rs]
            color = f"C{i}"
            ax.plot(rates, [r["latency_ms"]["all"][key]["p50"] for r in rs], marker="o",
                    color=color, label=f"{name} p50")
            ax.plot(rates, [r["latency_ms"]["all"][key]["p99"] for r in rs], marker="x",
                    linestyle="--", color=color, label=f"{name} p99")
        ax.set_xlabel("arrival rate (requests/s, Poisson)")
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Online latency vs rate, {share:g}% deterministic\n" + conditions_line(files),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+", help="files written by detllm bench --json")
    ap.add_argument("--out-dir", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "img"))
    ap.add_argument("--prefix", default="bench")
    ap.add_argument("--share", type=float, default=None,
                    help="deterministic share of the latency plot (default: the largest)")
    a = ap.parse_args()
    files, results = load(a.json)
    os.makedirs(a.out_dir, exist_ok=True)
    written = [
        plot_throughput(results, files,
                        os.path.join(a.out_dir, f"{a.prefix}_throughput_vs_share.png")),
        plot_latency(results, files, os.path.join(a.out_dir, f"{a.prefix}_latency_vs_rate.png"),
                     a.share),
    ]
    written = [w for w in written if w]
    if not written:
        sys.exit("nothing to plot: no offline or online results")
    for w in written:
        print(w)


if __name__ == "__main__":
    main()

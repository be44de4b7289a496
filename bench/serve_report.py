#!/usr/bin/env python3
"""Tables and plots from bench/serve_bench.py results (docs/results/serving.md).

  serve_report.py RESULT.json... [--md FILE] [--png FILE] [--title TEXT]

Prints (and writes to --md) a summary table per configuration (largest concurrency with zero failed
requests, most requests served at once, preemptions, lowest effective bits) and a table per
concurrency level (latency percentiles, requests/s, output tok/s). --png draws the effective bits
of the KV cache (and the KV bytes in use) over time for every configuration whose server has
/metrics, with the concurrency levels marked. Last, the roofline of mpkv's decode steps per level
(bench/serve_roofline.py; n/a for servers without the counters).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_roofline import roofline_table  # noqa: E402


def fmt(v, scale=1.0, nd=2):
    return "-" if v is None else f"{v * scale:.{nd}f}"


def largest_clean_level(levels):
    """Largest concurrency such that it and every lower level had no failed request (None: none)."""
    best = None
    for s in sorted(levels, key=lambda s: s["concurrency"]):
        if s["failed"] > 0:
            break
        best = s["concurrency"]
    return best


def peak(levels, key):
    vals = [s.get(key) for s in levels if s.get(key) is not None]
    return max(vals) if vals else None


def summary_table(results):
    rows = ["| configuration | KV budget MiB | largest concurrency, 0 failed | most streaming at once (client) "
            "| most running at once (/metrics) | preemptions | page shrinks | lowest effective bits | load avg |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lv = r["levels"]
        budget = r.get("extra", {}).get("kv_budget_mib")
        pre = [s.get("preemptions") for s in lv if s.get("preemptions") is not None]
        shrinks = sum(sum(s.get("page_shrinks", {}).values()) for s in lv) if r["metrics_available"] else None
        bits = [s.get("effective_bits_min") for s in lv if s.get("effective_bits_min")]
        rows.append(f"| {r['label']} | {fmt(budget, 1, 1)} | {largest_clean_level(lv)} | {peak(lv, 'streaming_at_once_max')} "
                    f"| {fmt(peak(lv, 'running_max'), 1, 0)} | {fmt(sum(pre), 1, 0) if pre else '-'} "
                    f"| {fmt(shrinks, 1, 0)} | {fmt(min(bits) if bits else None)} "
                    f"| {' '.join(f'{x:.1f}' for x in r.get('load_avg', []))} |")
    return "\n".join(rows)


def level_table(results):
    rows = ["| configuration | concurrency | ok / sent (cut; cut before a token) | failed | TTFT p50 / p99 s | TPOT p50 / p99 ms "
            "| ITL p50 / p99 ms | e2e p50 / p99 s | req/s | output tok/s | streaming at once | running max "
            "| preemptions | bits min |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for s in r["levels"]:
            rows.append(
                f"| {r['label']} | {s['concurrency']} | {s['completed']} / {s['requests']} ({s['cut']}; {s.get('cut_before_first_token', 0)}) | {s['failed']} "
                f"| {fmt(s['ttft_p50_s'])} / {fmt(s['ttft_p99_s'])} | {fmt(s['tpot_p50_s'], 1e3, 1)} / {fmt(s['tpot_p99_s'], 1e3, 1)} "
                f"| {fmt(s['itl_p50_s'], 1e3, 1)} / {fmt(s['itl_p99_s'], 1e3, 1)} | {fmt(s['e2e_p50_s'], 1, 1)} / {fmt(s['e2e_p99_s'], 1, 1)} "
                f"| {fmt(s['requests_per_s'], 1, 3)} | {fmt(s['output_tok_s'], 1, 1)} | {s['streaming_at_once_max']} "
                f"| {fmt(s.get('running_max'), 1, 0)} | {fmt(s.get('preemptions'), 1, 0)} | {fmt(s.get('effective_bits_min'))} |")
    return "\n".join(rows)


def failures(results):
    lines = []
    for r in results:
        for s in r["levels"]:
            if s["failed"]:
                lines.append(f"- {r['label']} at concurrency {s['concurrency']}: {s['failed']} failed, e.g. "
                             + "; ".join(str(e) for e in s["failure_examples"]))
    return "\n".join(lines)


def plot(results, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_metrics = [r for r in results if r["metrics_available"] and r["metrics"]]
    if not with_metrics:
        print("serve_report: no result has /metrics samples; no plot", file=sys.stderr)
        return
    fig, (ax_bits, ax_mib) = plt.subplots(2, 1, figsize=(10, 7), sharex=False)
    top = max([m.get("effective_bits") or 0 for r in with_metrics for m in r["metrics"]] + [16.0]) + 1.5
    for r in with_metrics:
        t = [m["t"] for m in r["metrics"]]
        bits = [m.get("effective_bits") or float("nan") for m in r["metrics"]]
        mib = [(m.get("kv_bytes_used") or 0) / 2**20 for m in r["metrics"]]
        line, = ax_bits.plot(t, bits, label=r["label"], lw=1.2)
        ax_mib.plot(t, mib, color=line.get_color(), lw=1.2, label=r["label"])
        for s in r["levels"]:
            ax_bits.axvline(s["t_begin_s"], color=line.get_color(), lw=0.4, ls=":")
            ax_bits.annotate(f"c={s['concurrency']}", (s["t_begin_s"], top - 1.0), fontsize=6, color=line.get_color())
        budget = r["levels"][-1].get("kv_budget_bytes")
        if budget:
            ax_mib.axhline(budget / 2**20, color="gray", lw=0.8, ls="--")
    ax_bits.set_ylabel("effective bits per K/V element\n(every byte counted: fp16 pages show > 16)")
    ax_bits.set_ylim(0, top)
    ax_bits.legend(fontsize=8, loc="lower left")
    ax_bits.set_title(title, fontsize=10)
    ax_mib.set_ylabel("KV MiB in use (dashed: budget)")
    ax_mib.set_xlabel("seconds since the first request (dotted lines: start of each concurrency level)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"serve_report: wrote {path}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    p.add_argument("--md")
    p.add_argument("--png")
    p.add_argument("--title", default="KV cache under one budget, serving benchmark")
    a = p.parse_args()
    results = [json.load(open(f)) for f in a.results]
    per_level = [(dict(r, label=f"{r['label']}, concurrency {s['concurrency']}"), s)
                 for r in results for s in r["levels"]]
    roofline = "Roofline of the decode steps:\n\n" + "\n".join(roofline_table(per_level))
    parts = (summary_table(results), level_table(results), roofline, failures(results))
    text = "\n\n".join(x for x in parts if x) + "\n"
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    if a.png:
        plot(results, a.png, a.title)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tables and the budget plot of the prefix-cache benchmark (scripts/bench_prefix_cache.sh,
docs/results/prefix_cache.md) from bench/multi_turn.py result files.

Usage: scripts/plot_prefix_cache.py --out-dir DIR RESULT.json...   (installs matplotlib with pip when missing)

Writes into DIR:
  tables.md          one row per run, ordered by budget then configuration: KV budget, token hit rate
                     (client: sum cached / sum prompt tokens; server: vllm:prefix_cache_hits / queries
                     over the run), TTFT p50 / p99, output tok/s, wall time against the schedule,
                     lateness p50, cached-page evictions and shrinks, failed turns, load average
  prefix_cache.png   token hit rate and TTFT p50 against the KV budget, one line per configuration
"""
import argparse
import json
import os
import subprocess
import sys

CONFIG_ORDER = ["nocache", "lru16", "floor8", "floor4", "floor2", "llama"]


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        r["_path"] = p
        runs.append(r)
    return runs


def rank(label):
    return (CONFIG_ORDER.index(label) if label in CONFIG_ORDER else len(CONFIG_ORDER), label)


def counter(run, prefix):
    """Sum over label sets of a counter's increase during the run (None without /metrics or the counter);
    the name with or without Prometheus' _total suffix."""
    m = run.get("metrics") or {}
    names = (prefix, prefix + "_total", prefix.removesuffix("_total"))
    vals = [v for k, v in (m.get("delta") or {}).items() if k.split("{")[0] in names]
    return sum(vals) if vals else None


def server_hit_rate(run):
    q, h = counter(run, "vllm:prefix_cache_queries"), counter(run, "vllm:prefix_cache_hits")
    return h / q if q else None


def fmt(v, nd=2, scale=1.0):
    return "-" if v is None else f"{v * scale:.{nd}f}"


def table(runs):
    head = ("| configuration | KV MiB | hit rate | server hit rate | TTFT p50 s | TTFT p99 s | out tok/s | "
            "wall s (schedule) | late p50 s | evictions | shrinks | failed | load |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(runs, key=lambda r: ((r.get("extra") or {}).get("kv_budget_mib") or 0, rank(r["label"]))):
        s = r["summary"]
        lines.append(
            f"| {r['label']} | {fmt((r.get('extra') or {}).get('kv_budget_mib'), 1)} | {fmt(s['hit_rate'], 3)} | "
            f"{fmt(server_hit_rate(r), 3)} | {fmt(s['ttft_p50_s'])} | {fmt(s['ttft_p99_s'])} | "
            f"{fmt(s['output_tok_s'], 1)} | {s['wall_s']:.0f} ({s['schedule_s']:.0f}) | {fmt(s['late_p50_s'])} | "
            f"{fmt(counter(r, 'mpkv:prefix_cache_evictions_total'), 0)} | "
            f"{fmt(counter(r, 'mpkv:prefix_cache_shrinks_total'), 0)} | {s['failed'] + s['skipped']} | "
            f"{fmt((r.get('load_avg_before') or [None])[0], 1)}-{fmt((r.get('load_avg') or [None])[0], 1)} |")
    w = runs[0]["workload"]
    return (f"Workload: {w['conversations']} conversations x {w['turns']} turns, system prompt ~{w['system_tokens']} "
            f"tokens, user turns {w['user_tokens'][0]}-{w['user_tokens'][1]} tokens, {w['max_tokens']}-token answers, "
            f"{w['rate']} turns/s ({w['order']}), seed {w['seed']}.\n\n" + "\n".join(lines) + "\n")


def plot(runs, path):
    try:
        import matplotlib
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "matplotlib"])
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    series = {}
    for r in runs:
        b = (r.get("extra") or {}).get("kv_budget_mib")
        if b:
            series.setdefault(r["label"], []).append((b, r["summary"]["hit_rate"], r["summary"]["ttft_p50_s"]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in sorted(series, key=rank):
        pts = sorted(series[label])
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] if p[1] is not None else float("nan") for p in pts], "o-", label=label)
        ax2.plot(xs, [p[2] if p[2] is not None else float("nan") for p in pts], "o-", label=label)
    for ax, title in ((ax1, "token hit rate (cached / prompt tokens)"), (ax2, "TTFT p50 (s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("KV budget (MiB)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    ax2.set_yscale("log")
    ax2.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax2.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax2.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    budgets = sorted({p[0] for pts in series.values() for p in pts})
    for ax in (ax1, ax2):
        ax.set_xticks(budgets, [f"{b:g}" for b in budgets])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax1.set_ylim(0, 1)
    ax1.legend(fontsize=8)
    w = runs[0]["workload"]
    fig.suptitle(f"{runs[0]['model']}: {w['conversations']} conversations x {w['turns']} turns, "
                 f"{w['rate']} turns/s, {(runs[0].get('extra') or {}).get('threads', '?')} threads", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    p.add_argument("--out-dir", required=True)
    a = p.parse_args()
    runs = load(a.results)
    with open(os.path.join(a.out_dir, "tables.md"), "w") as f:
        f.write(table(runs))
    plot(runs, os.path.join(a.out_dir, "prefix_cache.png"))
    print(f"plot_prefix_cache: {os.path.join(a.out_dir, 'tables.md')}, {os.path.join(a.out_dir, 'prefix_cache.png')}")


if __name__ == "__main__":
    main()

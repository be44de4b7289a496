#!/usr/bin/env python3
"""Tables and a throughput/latency plot for the long-generation serving benchmark
(scripts/bench_serving_long.sh, docs/results/serving.md).

Input: result JSONs of bench/serve_bench.py (one per configuration and run), each with one level.
Per generation length (workload.max_tokens) and request rate, one table: output tok/s and its ratio
to mpkv's f16 cache and to the best llama-server KV type in the same table, served / direct (bench/serve_direct.py: the same
requests through `mpkv generate`) for mpkv's rows, requests at once, TTFT /
TPOT / ITL / end-to-end p50 and p99, goodput at the TPOT SLO, failures, preemptions and the lowest
effective bits; then the roofline of mpkv's decode steps (bench/serve_roofline.py: the bytes and
multiply-adds its /metrics counted against the limits it probed; n/a for llama-server and direct rows).
The plot: output tok/s against TPOT p50, one point per configuration and run.
"""
import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_roofline import roofline_table  # noqa: E402


def fmt(v, scale=1.0, nd=2):
    return "-" if v is None else f"{v * scale:.{nd}f}"


def at_once(r, s):
    """Requests served at once: mpkv's /metrics peak, else llama-server's slot count."""
    if s.get("running_max") is not None:
        return s["running_max"]
    return r.get("extra", {}).get("n_parallel")


def group(results):
    """{(max_tokens, rate): [(result, level summary)]} in input order."""
    out = defaultdict(list)
    for r in results:
        for s in r["levels"]:
            out[(r["workload"]["max_tokens"], str(s.get("request_rate", "inf")))].append((r, s))
    return out


def table(rows):
    base = next((s["output_tok_s"] for r, s in rows if r["label"] == "mpkv f16"), None)
    peers = [s["output_tok_s"] for r, s in rows if r["label"].startswith("llama-server") and s["failed"] == 0]
    best_peer = max(peers) if peers else None
    direct = {r["label"][len("direct "):]: s["output_tok_s"] for r, s in rows if r["label"].startswith("direct ")}
    out = ["| configuration | at once | ok / sent | failed | output tok/s | x mpkv f16 | x best llama-server | x direct "
           "| TTFT p50 / p99 s | TPOT p50 / p99 ms | ITL p99 ms | e2e p50 / p99 s | goodput req/s "
           "| preemptions | bits min |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, s in rows:
        tok = s["output_tok_s"]
        out.append(
            f"| {r['label']} | {fmt(at_once(r, s), 1, 0)} | {s['completed']} / {s['requests']} | {s['failed']} "
            f"| {fmt(tok, 1, 1)} | {fmt(tok / base if base and tok else None)} "
            f"| {fmt(tok / best_peer if best_peer and tok else None)} "
            f"| {fmt(tok / direct[r['label']] if r['label'] in direct and tok else None)} "
            f"| {fmt(s['ttft_p50_s'])} / {fmt(s['ttft_p99_s'])} "
            f"| {fmt(s['tpot_p50_s'], 1e3, 1)} / {fmt(s['tpot_p99_s'], 1e3, 1)} | {fmt(s['itl_p99_s'], 1e3, 1)} "
            f"| {fmt(s['e2e_p50_s'], 1, 1)} / {fmt(s['e2e_p99_s'], 1, 1)} | {fmt(s.get('goodput_requests_per_s'), 1, 3)} "
            f"| {fmt(s.get('preemptions'), 1, 0)} | {fmt(s.get('effective_bits_min'))} |")
    return out


def plot(groups, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    markers = "osD^v<>pP*X"
    labels = sorted({r["label"] for rows in groups.values() for r, _ in rows})
    for key, rows in sorted(groups.items()):
        for r, s in rows:
            if s["tpot_p50_s"] is None or s["output_tok_s"] is None:
                continue
            i = labels.index(r["label"])
            ax.scatter(s["tpot_p50_s"] * 1e3, s["output_tok_s"], marker=markers[i % len(markers)],
                       color=f"C{i % 10}", s=45, label=r["label"])
            ax.annotate(f"{key[0]} tok, rate {key[1]}", (s["tpot_p50_s"] * 1e3, s["output_tok_s"]),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    handles, names = ax.get_legend_handles_labels()
    uniq = dict(zip(names, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    ax.set_xlabel("TPOT p50 (ms, lower is better)")
    ax.set_ylabel("output tok/s (higher is better)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    p.add_argument("--md", required=True)
    p.add_argument("--png")
    p.add_argument("--title", default="")
    a = p.parse_args()
    results = [json.load(open(f)) for f in a.results]
    groups = group(results)
    lines = [f"# {a.title}", ""] if a.title else []
    for (gen, rate), rows in sorted(groups.items()):
        lines += [f"## {gen} generated tokens, request rate {rate}/s", ""] + table(rows) + [""]
        lines += ["Roofline of the decode steps (mpkv serve's /metrics counters against its startup probe; "
                  "docs/serving.md \"Roofline counters\"):", ""] + roofline_table(rows) + [""]
        cmd = {r["label"]: r["extra"].get("server_argv") for r, _ in rows}
        lines += ["Servers:", ""] + [f"- {k}: `{' '.join(v)}`" for k, v in cmd.items() if v] + [""]
    with open(a.md, "w") as f:
        f.write("\n".join(lines))
    if a.png:
        plot(groups, a.png, a.title)


if __name__ == "__main__":
    main()

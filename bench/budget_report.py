#!/usr/bin/env python3
"""Report of scripts/bench_budget.sh: caches under one KV budget, side by side.

Reads RAW/<label>_r<round>.json (`mpkv bench --json`, one decode row each) for every cache of
--configs and round, prints one markdown table (median aggregate tok/s over the rounds, the ratio to
the first row, which must be f16, the sequences admitted, and the roofline of the median run: step
ms, MiB read per step by kind, the share of the read probe and of the int8 peak, the limit the
bench names) and writes the same as JSON to --out.

The ratio "x f16" is median over median. Each run's probes are its own (the bench measures the
read bandwidth and the int8 peak at start-up), so the shares say how far each run is from this
machine's limits as measured beside it.
"""
import argparse
import json
import os
import statistics
import sys


def parse_configs(text):
    """'label|options;label|options' -> [(label, options)]."""
    rows = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        label, _, opts = part.partition("|")
        rows.append((label.strip(), opts.strip()))
    return rows


def load_runs(raw, label, rounds):
    runs = []
    for r in range(1, rounds + 1):
        path = os.path.join(raw, f"{label}_r{r}.json")
        with open(path) as f:
            d = json.load(f)
        dec = d["decode"][0]
        runs.append({"round": r, "tok_s": dec["tok_s"], "sequences": dec["sequences"],
                     "kv_mib": dec["kv_mib"], "roofline": dec.get("roofline"),
                     "read_gb_s": d["machine"]["read_gb_s"], "isa": d["isa"], "threads": d["threads"]})
    return runs


def median_run(runs):
    """The run whose tok/s is the median (the lower middle one for an even count)."""
    ordered = sorted(runs, key=lambda x: x["tok_s"])
    return ordered[(len(ordered) - 1) // 2]


def summarize(label, opts, runs):
    mid = median_run(runs)
    roof = mid["roofline"] or {}
    by_bits = roof.get("kv_bytes_by_bits", {})
    return {"cache": label, "options": opts, "sequences": mid["sequences"],
            "tok_s_runs": [x["tok_s"] for x in runs],
            "tok_s": statistics.median(x["tok_s"] for x in runs),
            "step_ms": 1e3 * roof.get("step_seconds", float("nan")),
            "weights_mib": roof.get("weight_bytes", 0) / 2**20,
            "kv_mib_by_bits": {k: v / 2**20 for k, v in sorted(by_bits.items(), key=lambda kv: -int(kv[0]))},
            "read_probe_fraction": roof.get("read_probe_fraction", float("nan")),
            "int8_peak_fraction": roof.get("int8_peak_fraction", float("nan")),
            "binds": roof.get("binds", "-"), "read_probe_gb_s": mid["read_gb_s"]}


def table(rows):
    ref = rows[0]
    lines = ["| cache | sequences | x f16 | tok/s (runs) | median | x f16 | step ms | MiB read: weights, KV by bits "
             "| % read probe | % int8 peak | binds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = ", ".join(f"{t:.1f}" for t in r["tok_s_runs"])
        kv = " ".join(f"{b}:{m:.0f}" for b, m in r["kv_mib_by_bits"].items())
        lines.append(f"| {r['cache']} | {r['sequences']} | {r['sequences'] / ref['sequences']:.2f} | {runs} "
                     f"| {r['tok_s']:.1f} | **{r['tok_s'] / ref['tok_s']:.2f}x** | {r['step_ms']:.1f} "
                     f"| {r['weights_mib']:.0f}, {kv} | {100 * r['read_probe_fraction']:.0f}% "
                     f"| {100 * r['int8_peak_fraction']:.1f}% | {r['binds']} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="")
    a = ap.parse_args()
    configs = parse_configs(a.configs)
    if not configs or configs[0][0] != "f16":
        sys.exit("budget_report: the first cache of --configs must be f16 (the reference row)")
    try:
        rows = [summarize(label, opts, load_runs(a.raw, label, a.rounds)) for label, opts in configs]
    except (OSError, KeyError, IndexError, ValueError) as e:
        sys.exit(f"budget_report: a run's output is missing or malformed ({e}); see {a.raw}")
    for r in rows:
        r["tok_s_vs_f16"] = r["tok_s"] / rows[0]["tok_s"]
        r["sequences_vs_f16"] = r["sequences"] / rows[0]["sequences"]
    print(table(rows))
    with open(a.out, "w") as f:
        json.dump({"command": a.command, "rounds": a.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

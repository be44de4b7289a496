#!/usr/bin/env python3
"""Where a decode step's attention spends its time: `perf report --sort symbol` of one or more
`perf record` files of bench_kv_attention, the cache fill's functions left out, the rest grouped by
what they do (docs/results/speed.md section 11a) and printed as one markdown column per file.

Usage: perf record -e cpu-clock -F 2000 -o u2.data build/bench_kv_attention --ctx 32768 --threads 1 \\
           --reps 300 --shrink 0 --methods uniform2
       scripts/perf_attention_shares.py u2.data [more.data ...]
"""
import re
import subprocess
import sys

# Functions of the fill (random K/V, quantize, append) and the probes, not of attention.
FILL = re.compile(r"normal_distribution|mersenne|put_row|logf|write_window_rows|quantize_avx|quantize_ref|"
                  r"uniform_group_params|fill_cache|read_bandwidth|memmove|_start|append|main$|calloc|_int_malloc|loop_")
# First match wins (a KIVI key-score function's name mentions GroupParams in its template arguments).
CATEGORIES = [
    ("int8 key scores (KIVI: + per-group query fold and requantization)", r"scores_vnni|for_each_key_group|scores_q8|packed_scores"),
    ("int8 values (+ the weights' fold and quantization)", r"accumulate_vnni|accumulate_q8|packed_accumulate"),
    ("block scales / zeros to fp32 (`GroupParams`)", r"^mpkv::\(anonymous namespace\)::GroupParams::"),
    ("memory: the prefetch instructions waiting for fill buffers", r"prefetch_rows|prefetch_segment"),
    ("softmax: exp", r"exp_sum|__expf"),
    ("softmax: max, mask, chunk merge, state clear", r"max_value|softmax_partial|attend_segments|memset|finish_span"),
    ("planning (`plan_span`: segments, queries, units)", r"plan_span|block_bytes|block_offset|quantize_q8_row"),
    ("per-unit dispatch (thread pool, `run_unit`)", r"parallel_for|run_unit"),
    ("fp16 sink + window rows", r"f16_scores|f16_accumulate"),
]


def shares(path):
    out = subprocess.run(["perf", "report", "-i", path, "--no-children", "--sort", "symbol", "--stdio",
                          "--percent-limit", "0"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\[.\])\s+(.*\S)", line)
        if m and m.group(2) != "[k]" and not FILL.search(m.group(3)):
            rows.append((float(m.group(1)), m.group(3)))
    total = sum(p for p, _ in rows)
    acc = [0.0] * (len(CATEGORIES) + 1)
    for p, name in rows:
        k = next((i for i, (_, rx) in enumerate(CATEGORIES) if re.search(rx, name)), len(CATEGORIES))
        acc[k] += p
    return [100.0 * a / total for a in acc]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cols = [shares(f) for f in sys.argv[1:]]
    print("| share of attention samples | " + " | ".join(sys.argv[1:]) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for i, (label, _) in enumerate(CATEGORIES + [("other", None)]):
        print(f"| {label} | " + " | ".join(f"{c[i]:.1f}%" for c in cols) + " |")


if __name__ == "__main__":
    main()

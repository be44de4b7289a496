#!/usr/bin/env bash
# Throughput under one fixed KV budget (docs/results/eval.md section 4, docs/results/speed.md 11h /
# 13): the budget holds 4 sequences at fp16 for a context of C tokens (or BUDGET_MIB); `mpkv bench
# --parallel 0` admits as many sequences as it holds for their whole context
# (PagedKvCache::sequence_bytes_bound) under each cache, fills them (random K/V, --synthetic: decode
# speed does not depend on content) and times N decode steps of all of them together (one forward
# call per step). The caches run in ROUNDS alternating rounds (f16, kivi-2, ..., f16, kivi-2, ...)
# so that a change of load touches every cache alike; bench/budget_report.py prints the medians, the
# ratios to f16 and the median run's roofline (step ms, share of the read probe and of the int8
# peak, which limit binds), and writes OUT.
# Usage: scripts/bench_budget.sh [BUILD_DIR] [THREADS] [CONTEXT]   (defaults build 2 2048)
# Env: MODEL, PLANS (plan folder for the plan rows), CONFIGS ("label|options;label|options", the
#      first row is the reference and must be f16), ROUNDS (default 1), N (decode steps, default 16),
#      BUDGET_MIB (default: 4 x the f16 bound of one sequence), OUT (JSON, default
#      docs/results/eval/budget_throughput.json), RAW (folder for each run's output, default: a
#      temporary one), PROBE_MIB (the budget of the f16 probe run, default 100 MiB per 4096 tokens
#      of context: it must hold one f16 sequence; SmolLM2 needs 181 MiB at 8192).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
T=${2:-2}
C=${3:-2048}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PLANS=${PLANS:-docs/results/plans}
ROUNDS=${ROUNDS:-1}
N=${N:-16}
OUT=${OUT:-docs/results/eval/budget_throughput.json}
DEFAULT_CONFIGS="f16|--kv-method f16;kivi-2|--kv-method kivi --kv-bits 2;progressive-2|--kv-method progressive --kv-bits 2"
DEFAULT_CONFIGS+=";ratequant-2.5|--kv-plan $PLANS/ratequant_2.5.json;combined-2.5|--kv-plan $PLANS/combined_2.5.json"
DEFAULT_CONFIGS+=";ratequant-2|--kv-plan $PLANS/ratequant_2.json;combined-2|--kv-plan $PLANS/combined_2.json"
CONFIGS=${CONFIGS:-$DEFAULT_CONFIGS}
if [ -z "${RAW:-}" ]; then RAW=$(mktemp -d); trap 'rm -rf "$RAW"' EXIT; fi  # kept only when asked for
mkdir -p "$RAW" "$(dirname "$OUT")"
[ -x "$BUILD/mpkv" ] || { echo "bench_budget: no $BUILD/mpkv (build the mpkv_cli target)" >&2; exit 1; }
if [ -z "${BUDGET_MIB:-}" ]; then
  # fp16 bytes of one sequence of C + 16 + N tokens (all bytes counted), times 4: ask the f16 cache
  # itself (a probe budget of PROBE_MIB admits a sequence or two and prints the bound per sequence).
  F16_MIB=$($BUILD/mpkv bench -m "$MODEL" -t "$T" --synthetic -d "$C" -n "$N" -r 1 -p 16 --parallel 0 \
    --kv-budget-mib "${PROBE_MIB:-$((100 * ((C + 4095) / 4096)))}" --kv-method f16 2>/dev/null | sed -n 's/.*(\([0-9.]*\) MiB each at most;.*/\1/p' || true)
  [ -n "$F16_MIB" ] || { echo "bench_budget: could not read the f16 bound per sequence (raise PROBE_MIB?)" >&2; exit 1; }
  # The bound is printed to 0.01 MiB: round 4 x its largest value up to 0.1 MiB, so 4 fit.
  BUDGET_MIB=$(python3 -c "import math; print(math.ceil(40 * ($F16_MIB + 0.005)) / 10)")
  echo "budget: 4 x $F16_MIB MiB = $BUDGET_MIB MiB (fp16, context $C + 16 + $N)"
fi
IFS=';' read -r -a rows <<< "$CONFIGS"
for r in $(seq 1 "$ROUNDS"); do
  for row in "${rows[@]}"; do
    label=${row%%|*}; opts=${row#*|}
    echo "bench_budget: round $r $label ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
    # shellcheck disable=SC2086  # opts is a list of options
    "$BUILD"/mpkv bench -m "$MODEL" -t "$T" --synthetic -d "$C" -n "$N" -r 1 -p 16 --parallel 0 \
      --kv-budget-mib "$BUDGET_MIB" $opts --json "$RAW/${label}_r$r.json" > "$RAW/${label}_r$r.txt"
  done
done
python3 bench/budget_report.py --raw "$RAW" --configs "$CONFIGS" --rounds "$ROUNDS" --out "$OUT" \
  --command "MODEL=$MODEL ROUNDS=$ROUNDS N=$N BUDGET_MIB=$BUDGET_MIB scripts/bench_budget.sh $BUILD $T $C"

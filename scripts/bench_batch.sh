#!/usr/bin/env bash
# Batched decode figures of docs/results/speed.md section 6 (the goals they are judged against: the
# table at the top of speed.md), in one run:
#  1. decode aggregate tok/s against batch width 1/2/4/8/16 at context 1K (and 8K, last), 1 and 2 threads,
#     mpkv beside llama.cpp (bench/bench_batch.py; llama.cpp through bench/peer_llamacpp.py batch);
#  2. one KV budget, the one that holds 16 progressive-2 sequences of 1K + 16 tokens: f16 and
#     progressive-2 each admit what it holds (`mpkv bench --parallel 0`) and decode them together.
# Usage: scripts/bench_batch.sh [BUILD_DIR] [PYTHON_WITH_LLAMA_CPP] [OUT_DIR]
#        (defaults: build, .venv-bench/bin/python, docs/results/speed)
# PEER=0 skips llama.cpp; ROUNDS (default 1) repeats each mpkv / llama.cpp pair; T8K (default 1,2)
# and R8K (default 3): threads and runs per figure at 8K (the slowest part: 8K fills of 31 sequences).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PY=${2:-.venv-bench/bin/python}
OUT=${3:-docs/results/speed}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
ROUNDS=${ROUNDS:-1}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p "$OUT"
peer=(); [ "${PEER:-1}" = 0 ] && peer=(--no-peer)
echo "== $(date -u +%FT%TZ) $(uptime)"
# 1. Widths at 1K.
python3 bench/bench_batch.py --mpkv "$BUILD/mpkv" -m $M -t 1,2 -d 1024 -n 16 -r 3 --rounds "$ROUNDS" --python "$PY" \
  "${peer[@]}" --json "$OUT/batch_1k.json"
echo "== $(date -u +%FT%TZ) $(uptime)"
# 2. The budget: 16 x progressive-2's bound for one sequence (its own probe prints it).
C=1024
BOUND=$("$BUILD/mpkv" bench -m $M -t 1 --synthetic -d $C -n 16 -r 1 -p 16 --parallel 0 --kv-budget-mib 1000 \
  --kv-method progressive --kv-bits 2 | sed -n 's/.*(\([0-9.]*\) MiB each at most;.*/\1/p')
BUDGET=$(python3 -c "print(round(16 * $BOUND + 0.1, 2))")  # the printed bound is rounded down
echo "budget: 16 x $BOUND MiB = $BUDGET MiB (progressive-2, context $C + 16)"
for t in 1 2; do
  for kv in "f16" "progressive --kv-bits 2"; do
    # shellcheck disable=SC2086
    "$BUILD/mpkv" bench -m $M -t $t --synthetic -d $C -n 16 -r 3 -p 16 --parallel 0 --kv-budget-mib "$BUDGET" \
      --kv-method $kv --json "$OUT/budget_t${t}_${kv%% *}.json"
  done
done
python3 - "$OUT" "$BUDGET" <<'PY'
import json, sys
out, budget = sys.argv[1], float(sys.argv[2])
print(f"\n| threads | cache | sequences admitted in {budget} MiB | aggregate decode tok/s | x f16 | tok per CPU-second | x f16 |")
print("|---|---|---|---|---|---|---|")
for t in (1, 2):
    d = {kv: json.load(open(f"{out}/budget_t{t}_{kv}.json"))["decode"][0] for kv in ("f16", "progressive")}
    for kv, label in (("f16", "f16"), ("progressive", "progressive-2")):
        print(f"| {t} | {label} | {d[kv]['sequences']} | {d[kv]['tok_s']:.1f} | {d[kv]['tok_s'] / d['f16']['tok_s']:.2f} | "
              f"{d[kv]['cpu_tok_s']:.1f} | {d[kv]['cpu_tok_s'] / d['f16']['cpu_tok_s']:.2f} |")
PY
echo "== $(date -u +%FT%TZ) $(uptime)"
# 1b. Widths at 8K, last: fewer steps (each step of 16 sequences reads 16 x 8K fp16 rows per layer).
python3 bench/bench_batch.py --mpkv "$BUILD/mpkv" -m $M -t "${T8K:-1,2}" -d 8192 -n 8 -r "${R8K:-3}" --rounds "$ROUNDS" --python "$PY" \
  "${peer[@]}" --json "$OUT/batch_8k.json"
echo "== $(date -u +%FT%TZ) $(uptime)"

#!/usr/bin/env bash
# Task accuracy at equal KV memory (docs/accuracy_tasks.md, docs/results/accuracy.md): regenerates
# the task files (scripts/make_tasks.py, git-ignored tasks/), then per cell (one task file):
#   1. every method runs as its own `mpkv eval --task` process, JOBS at a time, its per-item rows
#      written to $OUT/rows/<cell>_<method>_outputs.jsonl (log beside it); a rows file already there
#      is kept (REUSE=1, the default), so a stopped run resumes where it was;
#   2. with PEER=1, llama.cpp's KV types (PEER_TYPES, default q8_0,q4_0) on the same token ids
#      (bench/peer_task_llamacpp.py; it says so and adds nothing when the peer binary is absent);
#   3. one `mpkv eval --task --import` over all the rows (no forward pass) writes the cell's report,
#      $OUT/<cell>.md and .json, every row scored by the one answer rule and paired with the f16 row.
# Usage: scripts/eval_accuracy.sh [build-dir]
# Environment (defaults for SmolLM2): MODEL, PLAN_DIR, BUDGET (--budget-method), METHODS, CELLS
# (task files in tasks/, without .jsonl), ITEMS (--task-items), PARALLEL, THREADS, JOBS, NICE, OUT
# (results folder), PEER, PEER_TYPES, REUSE, WIKI (make_tasks.py --wiki).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PLAN_DIR=${PLAN_DIR:-docs/results/plans_kivi}
BUDGET=${BUDGET:-combined:2.5}
METHODS=${METHODS:-f16,f16-evict,f16-trunc,kivi:2,kivi:3,uniform:2,progressive:2,combined:2.5,ratequant:2.5,pmkvq:2.5}
CELLS=${CELLS:-passkey_1024}
ITEMS=${ITEMS:-0}
PARALLEL=${PARALLEL:-1}
THREADS=${THREADS:-1}
JOBS=${JOBS:-2}
OUT=${OUT:-docs/results/accuracy/smollm2}
LENGTHS=${LENGTHS:-1024,2048,4096,8192}
NICE=${NICE:-19}
PEER=${PEER:-0}
PEER_TYPES=${PEER_TYPES:-q8_0,q4_0}
REUSE=${REUSE:-1}
python3 scripts/make_tasks.py --out tasks --items 220 --lengths "$LENGTHS" ${WIKI:+--wiki "$WIKI"}
mkdir -p "$OUT/rows"
common=(-m "$MODEL" --plan-dir "$PLAN_DIR" --budget-method "$BUDGET" --task-items "$ITEMS")

run_method() {  # cell method -> $OUT/rows/<cell>_<label>_outputs.jsonl
  local cell=$1 m=$2 rows="$OUT/rows/$1_${2/:/-}_outputs.jsonl"
  if [ "$REUSE" = 1 ] && [ -s "$rows" ]; then echo "eval_accuracy: $cell $m: kept $rows"; return; fi
  echo "eval_accuracy: $cell $m ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
  OMP_WAIT_POLICY=passive nice -n "$NICE" "$BUILD"/mpkv eval "${common[@]}" --task "tasks/$cell.jsonl" --methods "$m" \
    --parallel "$PARALLEL" -t "$THREADS" --outputs "$rows.part" > /dev/null 2> "${rows%_outputs.jsonl}_log.txt"
  mv "$rows.part" "$rows"
}

for cell in $CELLS; do
  for m in ${METHODS//,/ }; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run_method "$cell" "$m" &
  done
  if [ "$PEER" = 1 ]; then
    nice -n "$NICE" python3 bench/peer_task_llamacpp.py --task "tasks/$cell.jsonl" --items "$ITEMS" -m "$MODEL" \
      --kv-types "$PEER_TYPES" --mpkv "$BUILD/mpkv" -t "$THREADS" --out-dir "$OUT/rows" &
  fi
  wait
  imports=()
  for m in ${METHODS//,/ }; do
    rows="$OUT/rows/${cell}_${m/:/-}_outputs.jsonl"
    [ -s "$rows" ] || { echo "eval_accuracy: $cell $m failed (see ${rows%_outputs.jsonl}_log.txt)" >&2; exit 1; }
    imports+=("$rows")
  done
  for t in ${PEER_TYPES//,/ }; do  # the peer's rows, when it ran
    rows="$OUT/rows/${cell}_llama.cpp-${t}_outputs.jsonl"
    if [ "$PEER" = 1 ] && [ -s "$rows" ]; then imports+=("$rows"); fi
  done
  imports=$(IFS=,; echo "${imports[*]}")
  nice -n "$NICE" "$BUILD"/mpkv eval "${common[@]}" --task "tasks/$cell.jsonl" --import "$imports" \
    --md "$OUT/$cell.md" --json "$OUT/$cell.json" > /dev/null
  echo "eval_accuracy: $cell -> $OUT/$cell.md"
done
echo "eval_accuracy: done ($(date -u +%H:%M:%S))"

#!/usr/bin/env bash
# Task accuracy at equal KV memory (docs/accuracy_tasks.md, docs/results/accuracy.md): regenerates
# the task files (scripts/make_tasks.py, git-ignored tasks/) and runs `mpkv eval --task` on one task
# file at a time, so each finished cell is on disk while later ones run.
# Usage: scripts/eval_accuracy.sh [build-dir]
# Environment (defaults for SmolLM2): MODEL, PLAN_DIR, BUDGET (--budget-method), METHODS, CELLS
# (task files in tasks/, without .jsonl), ITEMS (--task-items), PARALLEL, THREADS, NICE, OUT (results folder).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PLAN_DIR=${PLAN_DIR:-docs/results/plans_kivi}
BUDGET=${BUDGET:-combined:2.5}
METHODS=${METHODS:-f16,f16-evict,f16-trunc,kivi:2,uniform:2,progressive:2,combined:2.5,ratequant:2.5,pmkvq:2.5}
CELLS=${CELLS:-passkey_2048 arith}
ITEMS=${ITEMS:-0}
PARALLEL=${PARALLEL:-4}
THREADS=${THREADS:-2}
OUT=${OUT:-docs/results/accuracy/smollm2}
LENGTHS=${LENGTHS:-1024,2048,4096,8192}
NICE=${NICE:-10}
python3 scripts/make_tasks.py --out tasks --items 220 --lengths "$LENGTHS"
mkdir -p "$OUT"
for cell in $CELLS; do
  echo "eval_accuracy: $cell ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
  OMP_WAIT_POLICY=passive nice -n "$NICE" "$BUILD"/mpkv eval -m "$MODEL" --task "tasks/$cell.jsonl" --task-items "$ITEMS" \
    --methods "$METHODS" --plan-dir "$PLAN_DIR" --budget-method "$BUDGET" --parallel "$PARALLEL" -t "$THREADS" \
    --md "$OUT/$cell.md" --json "$OUT/$cell.json" --outputs "$OUT/${cell}_outputs.jsonl" > /dev/null
done
echo "eval_accuracy: done ($(date -u +%H:%M:%S))"

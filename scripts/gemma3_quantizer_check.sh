#!/usr/bin/env bash
# Why the uniform-quantizer Gemma 3 plans (docs/results/plans_gemma3/) lose so much at 3 bits: the same
# plans (same bits per component, same smoothing) with every component's quantizer switched from the
# per-token uniform one to KIVI (per-channel keys, per-token values), and the plain methods at 3 bits,
# on the first 2048-token window of WikiText-2 test (second half scored), as docs/results/calibration.md's
# first look. Output: docs/results/plans_gemma3_kivi/quantizer_check_log.txt (PPL per row).
# FULL=1 also re-runs uniform-3 and the uniform-quantizer plans themselves (docs/results/calibration.md has
# their PPL from the same command; f16 here checks the build still gives its 11.364).
# STOP_AT=<epoch seconds>: rows not started by then are logged as not run (rows run in priority order).
# Usage: [FULL=1] [STOP_AT=...] scripts/gemma3_quantizer_check.sh [BUILD_DIR] [THREADS]   (default build, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
THREADS=${2:-1}
MPKV=$BUILD/mpkv
MODEL=models/gemma-3-270m-q4_k_m.gguf
WIKI=../shared/data/wikitext-2/test.txt
SWAP=$BUILD/plans_gemma3_kivi_swap
LOG=docs/results/plans_gemma3_kivi/quantizer_check_log.txt
mkdir -p "$SWAP" "$(dirname "$LOG")"
: > "$LOG"
row() {  # LABEL KV-OPTIONS...
  local label=$1; shift
  if [ -n "${STOP_AT:-}" ] && [ "$(date +%s)" -ge "$STOP_AT" ]; then echo "$label: not run (STOP_AT)" | tee -a "$LOG"; return; fi
  echo "\$ mpkv ppl -m $MODEL -f $WIKI -c 2048 --chunks 1 -t $THREADS $*" >> "$LOG"
  local ppl
  ppl=$("$MPKV" ppl -m $MODEL -f $WIKI -c 2048 --chunks 1 -t "$THREADS" "$@" 2>/dev/null | grep -i 'ppl\|perplexity' | tail -1)
  echo "$label: $ppl" | tee -a "$LOG"
}
swap() {  # METHOD: the 3-bit uniform-quantizer plan, every component switched to KIVI
  sed 's/"quantizer": "uniform"/"quantizer": "kivi"/' docs/results/plans_gemma3/$1_3.json > "$SWAP/$1_3.json"
  if [ "${FULL:-0}" = 1 ]; then row "$1-3 uniform-quantizer plan" --kv-plan docs/results/plans_gemma3/$1_3.json; fi
  row "$1-3 same bits, KIVI quantizer" --kv-plan "$SWAP/$1_3.json"
}
swap pmkvq
row "f16" --kv-method f16
row "kivi-3 (K3/V3)" --kv-method kivi --kv-bits 3
if [ "${FULL:-0}" = 1 ]; then row "uniform-3 (K3/V3)" --kv-method uniform --kv-bits 3; fi
swap combined
swap ratequant

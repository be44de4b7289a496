#!/usr/bin/env bash
# Reproduces docs/results/plans_gemma3_kivi/: the Gemma 3 270M calibration of scripts/calibrate_gemma3.sh
# (8 x 1024 tokens of the WikiText-2 tail, pi-scale 4, key smoothing) for the KIVI quantizer
# (per-channel keys, per-token values) instead of the per-token uniform one, whose 2-bit keys
# Gemma's key outliers ruin (docs/results/eval.md section 9); then plans for pmkvq / ratequant /
# combined at 2, 2.5, 3 and 4 average bits from the saved report, and a bit map (PNG) per plan.
# Usage: scripts/calibrate_gemma3_kivi.sh [BUILD_DIR] [THREADS]   (default build, 1)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
THREADS=${2:-1}
MPKV=$BUILD/mpkv
MODEL=models/gemma-3-270m-q4_k_m.gguf
WIKI=../shared/data/wikitext-2/test.txt
OUT=docs/results/plans_gemma3_kivi
mkdir -p "$OUT"
CALIB=$BUILD/calib_wikitext_tail.txt
tail -c 300000 "$WIKI" > "$CALIB"
REPORT=$OUT/calibration_report_gemma3_kivi.json

/usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" \
  "$MPKV" calibrate -m $MODEL --method ratequant --avg-bits 3 -o "$OUT/ratequant_3.json" --calib-file "$CALIB" \
  --calib-n 8 --calib-len 1024 --pi-scale 4 --quantizer kivi --report-out "$REPORT" -t "$THREADS" \
  2>&1 | tr '\r' '\n' | grep -v '^$' | tee "$OUT/calibrate_log.txt"
: > "$OUT/replan_log.txt"
for m in pmkvq ratequant combined; do
  for b in 2 2.5 3 4; do
    plan="$OUT/${m}_${b}.json"
    echo "\$ mpkv calibrate -m $MODEL --method $m --avg-bits $b --quantizer kivi -o $plan --report-in $REPORT" \
      >> "$OUT/replan_log.txt"
    "$MPKV" calibrate -m $MODEL --method $m --avg-bits $b --quantizer kivi -o "$plan" --report-in "$REPORT" \
      >> "$OUT/replan_log.txt"
    python3 scripts/plot_plan.py "$plan" "${plan%.json}.png"  # installs matplotlib when missing
  done
done

#!/usr/bin/env bash
# Reproduces docs/results/plans_gemma3/ (QUANTIZER uniform) or docs/results/plans_gemma3_kivi/ (kivi): one
# Gemma 3 270M calibration (8 x 1024 tokens, so the sliding-window layers' 512-token windows are active in the
# gradient pass; pi-scale 4, key smoothing), then plans for pmkvq / ratequant / combined at 2, 2.5, 3 and 4
# average bits from the saved report, and a bit map (PNG) per plan with windowed / global layers marked.
# The uniform (per-token) quantizer's 2-bit keys are what Gemma's key outliers ruin (docs/results/calibration.md,
# "Why the uniform-quantizer Gemma plans lose so much"); KIVI keeps keys per channel.
# Calibration text: the last 300 KB of WikiText-2 test, as for SmolLM2 (scripts/calibrate_all.sh).
# Usage: scripts/calibrate_gemma3.sh [BUILD_DIR] [THREADS] [QUANTIZER]   (default build, 2, uniform)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
THREADS=${2:-2}
QUANTIZER=${3:-uniform}
MPKV=$BUILD/mpkv
MODEL=models/gemma-3-270m-q4_k_m.gguf
WIKI=../shared/data/wikitext-2/test.txt
case "$QUANTIZER" in
  uniform) OUT=docs/results/plans_gemma3; REPORT=$OUT/calibration_report_gemma3.json ;;
  kivi) OUT=docs/results/plans_gemma3_kivi; REPORT=$OUT/calibration_report_gemma3_kivi.json ;;
  *) echo "calibrate_gemma3: quantizer '$QUANTIZER' has no plan folder (uniform, kivi)" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
CALIB=$BUILD/calib_wikitext_tail.txt
tail -c 300000 "$WIKI" > "$CALIB"

/usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" \
  "$MPKV" calibrate -m $MODEL --method ratequant --avg-bits 3 -o "$OUT/ratequant_3.json" --calib-file "$CALIB" \
  --calib-n 8 --calib-len 1024 --pi-scale 4 --quantizer "$QUANTIZER" --report-out "$REPORT" -t "$THREADS" \
  2>&1 | tr '\r' '\n' | grep -v '^$' | tee "$OUT/calibrate_log.txt"
: > "$OUT/replan_log.txt"
for m in pmkvq ratequant combined; do
  for b in 2 2.5 3 4; do
    plan="$OUT/${m}_${b}.json"
    echo "\$ mpkv calibrate -m $MODEL --method $m --avg-bits $b --quantizer $QUANTIZER -o $plan --report-in $REPORT" \
      >> "$OUT/replan_log.txt"
    "$MPKV" calibrate -m $MODEL --method $m --avg-bits $b --quantizer "$QUANTIZER" -o "$plan" --report-in "$REPORT" \
      >> "$OUT/replan_log.txt"
    python3 scripts/plot_plan.py "$plan" "${plan%.json}.png"  # installs matplotlib when missing
  done
done

#!/usr/bin/env bash
# Reproduces docs/results/plans/ (plans and calibration logs) and docs/results/ppl/ (their perplexities): one SmolLM2 calibration (16 x 512 tokens, pi-scale 4, key smoothing,
# uniform quantizer), then plans for pmkvq / ratequant / combined at 2, 2.5, 3 and 4 average bits
# (reusing the report), a PNG per plan, and `mpkv ppl --kv-plan` on 4 windows for one plan per method.
# Calibration text: the last 300 KB of WikiText-2 test, so it does not overlap the first windows ppl scores.
# Usage: scripts/calibrate_all.sh [BUILD_DIR]   (default build-plan)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-plan}
MPKV=$BUILD/mpkv
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
WIKI=../shared/data/wikitext-2/test.txt
OUT=docs/results/plans
PPL=docs/results/ppl   # results of running the plans, kept apart from the plans themselves
mkdir -p "$OUT" "$PPL"
CALIB=$BUILD/calib_wikitext_tail.txt
tail -c 300000 "$WIKI" > "$CALIB"
REPORT=$OUT/calibration_report_smollm2.json

$MPKV calibrate -m $MODEL --method ratequant --avg-bits 3 -o "$OUT/ratequant_3.json" --calib-file "$CALIB" \
  --calib-n 16 --calib-len 512 --pi-scale 4 --quantizer uniform --report-out "$REPORT" -t 2 | tee "$OUT/calibrate_log.txt"
for m in pmkvq ratequant combined; do
  for b in 2 2.5 3 4; do
    $MPKV calibrate -m $MODEL --method $m --avg-bits $b -o "$OUT/${m}_${b}.json" --report-in "$REPORT" | tee -a "$OUT/calibrate_log.txt"
    python3 scripts/plot_plan.py "$OUT/${m}_${b}.json" "$OUT/${m}_${b}.png"
  done
done
for p in pmkvq_3 ratequant_3 combined_3; do
  $MPKV ppl -m $MODEL -f "$WIKI" -c 512 --chunks 4 -t 2 --kv-plan "$OUT/$p.json" --json "$PPL/ppl_$p.json" | tee -a "$PPL/ppl_log.txt"
done
$MPKV ppl -m $MODEL -f "$WIKI" -c 512 --chunks 4 -t 2 --json "$PPL/ppl_f16.json" | tee -a "$PPL/ppl_log.txt"
$MPKV ppl -m $MODEL -f "$WIKI" -c 512 --chunks 4 -t 2 --kv-method uniform --kv-bits 3 --json "$PPL/ppl_uniform_3.json" | tee -a "$PPL/ppl_log.txt"

#!/usr/bin/env bash
# Sets everything up and runs the main job on the default model (SmolLM2-135M-Instruct Q4_1):
#   1. calibrate a 2.5-bit RateQuant plan for the KIVI quantizer (gradient sensitivities on 4 x 512
#      tokens, positions stretched x4, key smoothing) and the combined plan from the same report
#      (KIVI-quantizer plans did best at 2.5 bits: docs/results/eval.md section 3a);
#   2. generate a long greedy answer with the 16-bit cache and replay it through f16, KIVI-2,
#      progressive (final 2 bits, under a budget it fills), RateQuant-2.5 and combined-2.5 caches,
#      printing KL and top-1 agreement against the 16-bit cache along the answer (`mpkv eval`).
# Calibration text: the tail of WikiText-2 test when ../shared has it, else this repository's docs.
# A few minutes on 2 cores once built. Outputs in out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=out/demo
N=${DEMO_TOKENS:-1024}
mkdir -p "$OUT"
build/mpkv info -m "$MODEL" | head -n 12
echo
if [ -f ../shared/data/wikitext-2/test.txt ]; then
  tail -c 300000 ../shared/data/wikitext-2/test.txt > "$OUT/calib.txt"
else
  cat README.md docs/*.md docs/results/*.md > "$OUT/calib.txt"
fi
build/mpkv calibrate -m "$MODEL" --method ratequant --avg-bits 2.5 --quantizer kivi -o "$OUT/ratequant_2.5.json" \
  --calib-file "$OUT/calib.txt" --calib-n 4 --calib-len 512 --pi-scale 4 --report-out "$OUT/calibration_report.json"
build/mpkv calibrate -m "$MODEL" --method combined --avg-bits 2.5 --quantizer kivi -o "$OUT/combined_2.5.json" \
  --report-in "$OUT/calibration_report.json"
echo
build/mpkv eval -m "$MODEL" --drift-tokens "$N" --drift-bucket 128 \
  --methods kivi:2,progressive:2,ratequant:2.5,combined:2.5 --plan-dir "$OUT" \
  --drift-prompt "Explain, step by step and in detail, how a refrigerator keeps food cold." \
  --json "$OUT/demo_eval.json" --md "$OUT/demo_eval.md"

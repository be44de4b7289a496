#!/usr/bin/env bash
# Rewrites the committed plans from their saved calibration reports (no calibration pass, about a
# second per plan): docs/results/plans/{pmkvq,ratequant,combined}_{2,2.5,3,4}.json from
# calibration_report_smollm2.json (uniform quantizer) and docs/results/plans_kivi/ from
# calibration_report_kivi.json (scripts/eval_smollm2_8k.sh plans), with the flags their scripts used.
# Run it when the allocation stage changes (src/calib/plan_allocation.*); PNGs are redrawn with
# scripts/plot_plan.py (which pip-installs matplotlib when missing).
# Usage: scripts/replan_from_reports.sh [BUILD_DIR]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
MPKV=${1:-build}/mpkv
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
plot() { python3 scripts/plot_plan.py "$1" "${1%.json}.png"; }  # installs matplotlib when missing
replan() {  # DIR REPORT QUANTIZER METHOD BITS
  local out="$1/$4_$5.json"
  "$MPKV" calibrate -m "$MODEL" --method "$4" --avg-bits "$5" --quantizer "$3" -o "$out" --report-in "$2"
  plot "$out"
}
OUT=docs/results/plans
: > "$OUT/replan_log.txt"
for m in pmkvq ratequant combined; do
  for b in 2 2.5 3 4; do
    replan "$OUT" "$OUT/calibration_report_smollm2.json" uniform $m $b | tee -a "$OUT/replan_log.txt"
  done
done
# docs/results/plans_kivi (KIVI quantizer, solved for 8192 tokens): the plans stage of eval_smollm2_8k.sh.
scripts/eval_smollm2_8k.sh "${1:-build}" plans

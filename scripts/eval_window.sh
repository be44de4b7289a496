#!/usr/bin/env bash
# Quality cost of the fp16 window (docs/results/window.md): SmolLM2 under `mpkv eval`'s decode
# protocol with windows of 16 / 32 / 64 / 128 recent positions kept at 16 bits, for KIVI-2,
# progressive-2 and the combined KIVI plan of 2.5 bits.
#   plans  docs/results/plans_window/{kivi,progressive}-wW_2.json (hand-written: what
#          `--kv-method kivi|progressive --kv-bits 2 --kv-window W` builds) and combined-wW_2.5.json
#          (re-solved from plans_kivi/calibration_report_kivi.json with --window W: --avg-bits 2.5,
#          --max-len 8192, the KIVI quantizer); combined-w16eq_2.5.json: the same report re-solved
#          with --window 16 for the byte target of combined-w128_2.5 (equal bytes per 8K sequence:
#          the 16-bit bytes the smaller window frees buy code bits)
#   eval2k f16 + every plan, -c 2048, 1 window (the first 2048 tokens of WikiText-2 test)
#   eval8k f16 + the rows in ROWS8K, -c 8192, 1 window (results: OUT8K, default eval_smollm2_8k_window)
# Usage: scripts/eval_window.sh [BUILD_DIR] [plans] [eval2k] [eval8k]   (default: build, all)
# Env: THREADS (default 1), ROWS2K, ROWS8K (plan names, comma-separated, after f16).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
STAGES=${*:-plans eval2k eval8k}
MPKV=$BUILD/mpkv
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
WIKI=../shared/data/wikitext-2/test.txt
D=docs/results/plans_window
E=docs/results/eval
THREADS=${THREADS:-1}
WINDOWS="16 32 64 128"
all_rows() {
  local rows=""
  for m in kivi progressive; do for w in $WINDOWS; do rows+="plan:$m-w${w}_2,"; done; done
  for w in $WINDOWS; do rows+="plan:combined-w${w}_2.5,"; done
  echo "${rows%,}"
}
ROWS2K=${ROWS2K:-$(all_rows)}
rows8k() {  # every KIVI-2 and progressive-2 window, and the combined plan at 16 / 64 / 128
  local rows=""
  for m in kivi progressive; do for w in $WINDOWS; do rows+="plan:$m-w${w}_2,"; done; done
  echo "${rows}plan:combined-w16_2.5,plan:combined-w16eq_2.5,plan:combined-w64_2.5,plan:combined-w128_2.5"
}
ROWS8K=${ROWS8K:-$(rows8k)}
export OMP_WAIT_POLICY=passive

if [[ " $STAGES " == *" plans "* ]]; then
  mkdir -p $D
  for w in $WINDOWS; do
    for m in kivi progressive; do
      if [[ $m == kivi ]]; then q=kivi; prog=false; else q=uniform; prog=true; fi
      printf '{"format": "mpkv-kv-plan", "version": 1, "method": "%s",\n "model": {"n_layer": 30, "n_head_kv": 3, "head_dim": 64},\n "progressive": %s, "window": %d, "sink": 1, "page_tokens": 64,\n "default": {"quantizer": "%s", "bits": 2, "group": 0}}\n' \
        $m $prog "$w" $q > "$D/$m-w${w}_2.json"
    done
    $MPKV calibrate -m $MODEL --quantizer kivi --max-len 8192 --method combined --avg-bits 2.5 --window "$w" \
      --report-in docs/results/plans_kivi/calibration_report_kivi.json -o "$D/combined-w${w}_2.5.json"
  done 2>&1 | tee $D/plans_log.txt
  # The byte target of the R = 128 plan (one 8192-token sequence), spent with a 16-row window.
  budget_mib=$(python3 -c "import json; print(json.load(open('$D/combined-w128_2.5.json'))['solve']['budget_bytes'] / 1048576)")
  $MPKV calibrate -m $MODEL --quantizer kivi --max-len 8192 --method combined --kv-budget-mib "$budget_mib" --window 16 \
    --report-in docs/results/plans_kivi/calibration_report_kivi.json -o "$D/combined-w16eq_2.5.json" 2>&1 | tee -a $D/plans_log.txt
fi

run_eval() {  # CTX ROWS NAME
  nice -n 10 $MPKV eval -m $MODEL -f "$WIKI" -c "$1" --windows 1 --protocols decode --methods "f16,$2" \
    --plan-dir $D -t "$THREADS" --json "$E/$3.json" --md "$E/$3.md" 2>&1 | tee "$E/$3_log.txt"
}
if [[ " $STAGES " == *" eval2k "* ]]; then run_eval 2048 "$ROWS2K" eval_smollm2_2k_window; fi
if [[ " $STAGES " == *" eval8k "* ]]; then run_eval 8192 "$ROWS8K" "${OUT8K:-eval_smollm2_8k_window}"; fi

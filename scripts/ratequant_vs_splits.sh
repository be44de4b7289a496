#!/usr/bin/env bash
# RateQuant against every uniform K/V split at 2.5 and 3 bits, same quantizer, same key
# smoothing, same bytes (docs/calibration.md, "Uniform K/V splits against RateQuant"), from a fresh
# calibration with the current code (alpha search and sensitivities over what the runtime quantizes).
# Writes docs/results/plans_fid5/ (report, plans, logs, eval tables).
#
# Stages (any subset, default all):
#   calib   the SmolLM2 calibration of docs/results/calibration.md (16 x 512 tokens of the WikiText-2
#           tail, pi-scale 4, uniform quantizer) -> calibration_report_smollm2.json
#   plans   ratequant / pmkvq / combined at 2.5 and 3 bits and the fixed splits K3/V2, K2/V3, K4/V2,
#           K3/V3, K2/V4 from that report (one sequence of 4096 tokens, window 128, sink 1)
#   eval    mpkv eval --methods f16,ratequant,split --bits 2.5,3
#           (decode protocol, CTX tokens x WINDOWS windows of WikiText-2 test; the stored bits per
#           element column is the bytes check: every split at b must equal ratequant-b)
#   ppl     the PPL rows of docs/results/calibration.md ("The plans run"), re-run with the current
#           code: `mpkv ppl -c 512 --chunks 4` for f16, uniform K3/V3, the 3-bit plans of plans/
#           (the calibration over what the runtime quantizes, docs/results/calibration.md, the
#           section on the report and plans of plans/) and of plans_fid5/ (this calibration), the
#           fixed splits and a direct (non-progressive) combined plan
# Usage: scripts/ratequant_vs_splits.sh [BUILD_DIR] [calib] [plans] [eval] [ppl]
# Env: CTX (default 1024), WINDOWS (default 2), THREADS (default 1), CALIB_N (default 16).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
STAGES=${*:-calib plans eval ppl}
MPKV=$BUILD/mpkv
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
WIKI=../shared/data/wikitext-2/test.txt
OUT=docs/results/plans_fid5
REPORT=$OUT/calibration_report_smollm2.json
CTX=${CTX:-1024}
WINDOWS=${WINDOWS:-2}
THREADS=${THREADS:-1}
CALIB_N=${CALIB_N:-16}
mkdir -p "$OUT"
CALIB=$BUILD/calib_wikitext_tail.txt
tail -c 300000 "$WIKI" > "$CALIB"

if [[ " $STAGES " == *" calib "* ]]; then
  cmd=($MPKV calibrate -m $MODEL --method ratequant --avg-bits 3 -o "$OUT/ratequant_3.json" --calib-file "$CALIB"
       --calib-n "$CALIB_N" --calib-len 512 --pi-scale 4 --quantizer uniform --report-out "$REPORT" -t "$THREADS")
  { echo "\$ ${cmd[*]}"; /usr/bin/time -v "${cmd[@]}" 2>&1 | grep -v '\['; } | tee "$OUT/calibrate_log.txt"
fi

if [[ " $STAGES " == *" plans "* ]]; then
  : > "$OUT/plans_log.txt"
  plan() {  # OUT_NAME ARGS...
    local name=$1
    shift
    local cmd=($MPKV calibrate -m $MODEL --quantizer uniform -o "$OUT/$name.json" --report-in "$REPORT" "$@")
    { echo "\$ ${cmd[*]}"; "${cmd[@]}"; } 2>&1 | tee -a "$OUT/plans_log.txt"
  }
  for b in 2.5 3; do
    for m in ratequant pmkvq combined; do plan "${m}_$b" --method $m --avg-bits $b; done
  done
  for kv in "3 2" "2 3" "4 2" "3 3" "2 4"; do
    set -- $kv
    plan "fixed_k$1v$2" --method fixed --k-bits "$1" --v-bits "$2"
  done
fi

if [[ " $STAGES " == *" eval "* ]]; then
  cmd=($MPKV eval -m $MODEL -f $WIKI -c "$CTX" --windows "$WINDOWS" --protocols decode
       --methods f16,ratequant,split --bits 2.5,3 --plan-dir "$OUT" -t "$THREADS"
       --json "$OUT/eval_c$CTX.json" --md "$OUT/eval_c$CTX.md")
  { echo "\$ ${cmd[*]}"; "${cmd[@]}" 2>&1 | grep -v '\['; } | tee "$OUT/eval_c${CTX}_log.txt"
fi

if [[ " $STAGES " == *" ppl "* ]]; then
  $MPKV calibrate -m $MODEL --quantizer uniform -o "$OUT/combined_direct_3.json" --report-in "$REPORT" \
    --method combined --avg-bits 3 --direct > /dev/null
  : > "$OUT/ppl_log.txt"
  ppl() {  # KV options...
    local cmd=($MPKV ppl -m $MODEL -f $WIKI -c 512 --chunks 4 -t "$THREADS" "$@")
    { echo "\$ ${cmd[*]}"; "${cmd[@]}" 2>&1 | grep -v '\['; } | tee -a "$OUT/ppl_log.txt"
  }
  ppl
  ppl --kv-method uniform --kv-bits 3
  for p in docs/results/plans/{pmkvq,ratequant,combined}_3 $OUT/{pmkvq,ratequant,combined,combined_direct}_3 \
           $OUT/fixed_k4v2 $OUT/fixed_k3v3; do
    ppl --kv-plan "$p.json"
  done
fi

#!/usr/bin/env bash
# Quality of SmolLM2 at context 8192 with 95% intervals (docs/results/eval.md section 8): KIVI-quantizer
# plans solved for one sequence of 8192 tokens, one `mpkv eval` decode run over the rows that decide
# the goals (judged in eval.md section 8b), and llama.cpp's q8_0 / q5_0 on the same tokens.
#   calib  one calibration (16 x 512 tokens of the last 300 KB of WikiText-2 test, pi-scale 4, KIVI
#          quantizer, smoothing scored at the 2.5-bit widths K3/V2) -> plans_kivi/calibration_report_kivi.json
#   plans  from that report: {pmkvq,ratequant,combined}_{2,2.5,3,3.5} (--avg-bits, --max-len 8192),
#          fixed_{2.5,3} (K3/V2, K3/V3 with the same smoothing: the splits RateQuant must beat), fixed_k4v2,
#          fixed_k2v4, fixed_k2v3 (the other splits of 3 and 2.5 bits) and
#          {combined,pmkvq}-sb3.5_2.2 (solved for the bytes of 3.5 stored bits per element at 8191 held
#          positions: 3.5 * 8191 * 30 layers * 3 KV heads * 64 * 2 / 8 bytes = 39.37 MiB; 2.2 average
#          bits); then the two budgets shown infeasible (3.0 stored bits; PM-KVQ at the all-2 fixed bytes)
#   eval   f16 + the rows in ROWS, -c 8192, 1 window (the first 8192 tokens of WikiText-2 test), into
#          docs/results/eval/eval_smollm2_8k_NAME.{json,md}
#   peer   llama.cpp f16 / q8_0 / q5_0 (+ its no-flash-attention floor) on the same window
# Usage: scripts/eval_smollm2_8k.sh [BUILD_DIR] [calib] [plans] [eval] [peer]   (default: build, all)
# Env: THREADS (default 1), ROWS (eval methods after f16), NAME (eval output name; default goal_rows: the
# default ROWS are the rows that decide the goals, 2 to 4 bits), PY (python with llama-cpp-python, e.g.
# .venv-bench/bin/python from scripts/install_peer.sh). On a shared machine those rows ran as several evals,
# each NAME saying its rows (eval.md section 8: kivi25, combined_sb35_pmkvq2, ratequant25, fixed25, 3bit; and
# kv_splits, the other K/V splits); on an idle one the default ROWS is one run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
STAGES=${*:-calib plans eval peer}
MPKV=$BUILD/mpkv
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
WIKI=../shared/data/wikitext-2/test.txt
K=docs/results/plans_kivi
E=docs/results/eval
THREADS=${THREADS:-1}
PY=${PY:-python3}
ROWS=${ROWS:-plan:combined-sb3.5_2.2,pmkvq:2,kivi:2,kivi:2.5,ratequant:2.5,plan:fixed_2.5,kivi:3,ratequant:3,plan:fixed_3,kivi:4}
NAME=${NAME:-goal_rows}
REPORT=$K/calibration_report_kivi.json
export OMP_WAIT_POLICY=passive

if [[ " $STAGES " == *" calib "* ]]; then
  CALIB=$BUILD/calib_wikitext_tail.txt
  tail -c 300000 "$WIKI" > "$CALIB"
  $MPKV calibrate -m $MODEL --method ratequant --avg-bits 2.5 --max-len 8192 --quantizer kivi -o "$K/ratequant_2.5.json" \
    --calib-file "$CALIB" --calib-n 16 --calib-len 512 --pi-scale 4 --report-out "$REPORT" -t "$THREADS" 2>&1 |
    grep -v '\[' | tee "$K/calibrate_log.txt"
fi

if [[ " $STAGES " == *" plans "* ]]; then
  plan() {  # NAME ARGS...
    local name=$1
    shift
    $MPKV calibrate -m $MODEL --quantizer kivi --max-len 8192 -o "$K/$name.json" --report-in "$REPORT" "$@"
    python3 scripts/plot_plan.py "$K/$name.json" "$K/$name.png"
  }
  {
    for m in pmkvq ratequant combined; do
      for b in 2 2.5 3 3.5; do plan "${m}_$b" --method $m --avg-bits $b; done
    done
    for b in 2.5 3; do plan "fixed_$b" --method fixed --avg-bits $b; done
    for kv in "4 2" "2 4" "2 3"; do  # the other splits at 3 and 2.5 bits (K3/V3 and K3/V2 are fixed_3, fixed_2.5)
      read -r kb vb <<< "$kv"
      plan "fixed_k${kb}v${vb}" --method fixed --k-bits "$kb" --v-bits "$vb"
    done
    for m in combined pmkvq; do plan $m-sb3.5_2.2 --method $m --kv-budget-mib 39.37; done
    for m in pmkvq ratequant combined; do  # 3.0 stored bits: below every method's smallest cache
      $MPKV calibrate -m $MODEL --quantizer kivi --max-len 8192 -o /tmp/infeasible.json --report-in "$REPORT" \
        --method $m --kv-budget-mib 33.746 2>&1 || true
    done
    $MPKV calibrate -m $MODEL --quantizer kivi --max-len 8192 -o /tmp/infeasible.json --report-in "$REPORT" \
      --method pmkvq --kv-budget-mib 35.90 2>&1 || true  # PM-KVQ at the all-2-bit fixed plan's bytes
  } | tee "$K/replan_log.txt"
fi

if [[ " $STAGES " == *" eval "* ]]; then
  nice -n 10 $MPKV eval -m $MODEL -f "$WIKI" -c 8192 --windows 1 --protocols decode --methods "f16,$ROWS" \
    --plan-dir $K -t "$THREADS" --json $E/eval_smollm2_8k_$NAME.json --md $E/eval_smollm2_8k_$NAME.md 2>&1 |
    tee $E/eval_smollm2_8k_${NAME}_log.txt
fi

if [[ " $STAGES " == *" peer "* ]]; then
  nice -n 10 "$PY" bench/peer_llamacpp.py eval -m $MODEL -f "$WIKI" -c 8192 --windows 1 -t "$THREADS" \
    --kv-types f16 q8_0 q5_0 --flash-attn --json $E/peer_llamacpp_eval_8k_q8q5.json 2>&1 |
    tee $E/peer_llamacpp_eval_8k_q8q5_log.txt
fi

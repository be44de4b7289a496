#!/usr/bin/env bash
# The ablation table of docs/results/ablation.md: every plan it needs, made by committed
# commands, then one `mpkv eval` run over all of them (decode protocol: the real PagedKvCache, every
# byte counted; the table prints stored bits per element from the cache's own byte count), then a
# bytes check (stored bits per element side by side per nominal width).
#
# Calibrations (small, so the whole script fits a shared machine: --calib-n CALIB_N, default 2; the
# main calibration with --calib-n 16 is docs/results/plans/calibration_report_smollm2.json):
#   pi1, pi4, pi16      CALIB_N x 512 tokens at RoPE position scale 1, 4, 16 (positional interpolation)
#   pi1long             CALIB_N x 2048 tokens at scale 1 (calibrating on 4x longer text instead of PI)
#   rotated, turbo      the rotated and TurboQuant-style quantizers, CALIB_N x 512 at scale 4
# Plans (all for one sequence of 4096 tokens, window 128, sink 1, as the committed plans):
#   fixed_{uniform,kivi}_3, fixed-progressive_uniform_3   baselines with the calibration's smoothing
#   ratequant_pi{1,4,16}_3, ratequant_pi1long_3          PI scale vs longer text
#   {pmkvq,combined}_direct_3                             the same finals quantized directly
#   ratequant_beta1.5_3                                   RateQuant with a wrong beta (fitted ~4.8)
#   ratequant_{rotated,turbo}_3                           plans for the other quantizers
#   ratequant_3.5                                         the 3.5-bit point
#   {pmkvq,ratequant,combined}_3                          the calibrated methods (main report)
# Usage: scripts/ablation.sh [BUILD_DIR] [calib] [plans] [eval]   (default: build, all three stages)
# Env: CTX (default 512), WINDOWS (default 1), THREADS (default 1), CALIB_N (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
STAGES=${*:-calib plans eval}
MPKV=$BUILD/mpkv
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
WIKI=../shared/data/wikitext-2/test.txt
OUT=docs/results/ablation
REP=$OUT/reports
PLANS=$OUT/plans
MAIN=docs/results/plans/calibration_report_smollm2.json
KIVI=docs/results/plans_kivi/calibration_report_kivi.json
CTX=${CTX:-512}
WINDOWS=${WINDOWS:-1}
THREADS=${THREADS:-1}
CALIB_N=${CALIB_N:-2}
mkdir -p "$REP" "$PLANS"
CALIB=$BUILD/calib_wikitext_tail.txt
tail -c 300000 "$WIKI" > "$CALIB"

calib() {  # NAME QUANTIZER PI LEN
  $MPKV calibrate -m $MODEL --method ratequant --avg-bits 3 -o "$PLANS/ratequant_$1_3.json" --calib-file "$CALIB" \
    --calib-n "$CALIB_N" --calib-len "$4" --pi-scale "$3" --quantizer "$2" --report-out "$REP/$1.json" -t "$THREADS"
}
plan() {  # REPORT QUANTIZER OUT_NAME ARGS...
  local report=$1 q=$2 name=$3
  shift 3
  $MPKV calibrate -m $MODEL --quantizer "$q" -o "$PLANS/$name.json" --report-in "$report" "$@"
}

if [[ " $STAGES " == *" calib "* ]]; then
  : > "$OUT/calibrate_log.txt"
  for spec in "pi1 uniform 1 512" "pi4 uniform 4 512" "pi16 uniform 16 512" "pi1long uniform 1 2048" \
              "rotated rotated 4 512" "turbo turbo 4 512"; do
    set -- $spec
    echo "== calibration $1" | tee -a "$OUT/calibrate_log.txt"
    calib "$@" 2>&1 | grep -v '\[' | tee -a "$OUT/calibrate_log.txt"
  done
  fi

if [[ " $STAGES " == *" plans "* ]]; then
  {
    plan $MAIN uniform fixed_uniform_3 --method fixed --avg-bits 3
    # Same bytes: the progressive methods are solved for the bytes of the 3-bit uniform plan (their
    # --avg-bits budget would count the 16-bit newest page and give them ~5% more).
    B3=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['solve']['budget_bytes'] / 1048576)" \
         "$PLANS/fixed_uniform_3.json")
    plan $MAIN uniform ratequant_3 --method ratequant --avg-bits 3
    for m in pmkvq combined; do plan $MAIN uniform ${m}_3 --method $m --kv-budget-mib "$B3" --max-len 4096; done
    plan $KIVI kivi fixed_kivi_3 --method fixed --avg-bits 3
    plan $MAIN uniform fixed-progressive_uniform_3 --method fixed --progressive --avg-bits 3
    plan $MAIN uniform pmkvq_direct_3 --method pmkvq --direct --kv-budget-mib "$B3" --max-len 4096
    plan $MAIN uniform combined_direct_3 --method combined --direct --kv-budget-mib "$B3" --max-len 4096
    plan $MAIN uniform ratequant_beta1.5_3 --method ratequant --force-beta 1.5 --avg-bits 3
    plan $MAIN uniform ratequant_3.5 --method ratequant --avg-bits 3.5
  } | tee "$OUT/plans_log.txt"
fi

if [[ " $STAGES " == *" eval "* ]]; then
  METHODS=f16,uniform:3,plan:fixed_uniform_3,kivi:3,plan:fixed_kivi_3,progressive:3,plan:fixed-progressive_uniform_3
  METHODS+=,ratequant:3,plan:ratequant_pi1_3,plan:ratequant_pi4_3,plan:ratequant_pi16_3,plan:ratequant_pi1long_3
  METHODS+=,pmkvq:3,plan:pmkvq_direct_3
  METHODS+=,plan:ratequant_beta1.5_3
  METHODS+=,rotated:3,plan:ratequant_rotated_3,turbo:3,plan:ratequant_turbo_3
  METHODS+=,uniform:3.5,plan:ratequant_3.5
  OMP_WAIT_POLICY=passive $MPKV eval -m $MODEL -f "$WIKI" -c "$CTX" --windows "$WINDOWS" --protocols decode \
    --methods "$METHODS" --plan-dir "$PLANS" -t "$THREADS" --json "$OUT/ablation.json" --md "$OUT/ablation_eval.md"
  # Bytes check: stored bits per element of every cache, grouped by nominal bits.
  python3 - "$OUT/ablation.json" <<'PY' | tee "$OUT/bytes_check.txt"
import json, sys, collections
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["protocol"] == "decode" and r["method"] != "f16"]
by = collections.defaultdict(list)
for r in rows: by[r["bits"]].append((r["label"], r["stored_bits_per_element"]))
for b, rs in sorted(by.items()):
    lo, hi = min(s for _, s in rs), max(s for _, s in rs)
    print(f"nominal {b:g} bits: stored bits/element {lo:.3f} .. {hi:.3f} (spread {100 * (hi - lo) / lo:.1f}%)")
    for label, s in rs: print(f"  {label:40s} {s:.3f}{'  <- differs by more than 1%' if s > lo * 1.01 else ''}")
PY
fi

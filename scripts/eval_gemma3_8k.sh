#!/usr/bin/env bash
# The Gemma 3 270M evaluation matrix at 8K (docs/results/eval.md section 9): one window of 8192 tokens of
# WikiText-2 test (4095 scored), decode protocol, 95% block-bootstrap intervals; f16, uniform, KIVI,
# progressive and the KIVI-quantizer plans of docs/results/plans_gemma3_kivi/ at 2, 2.5, 3 and 4 bits,
# then llama.cpp's KV types on the same tokens, then the interval figure. Each mpkv stream costs a few
# CPU-minutes at 8K (1 thread), so on a shared machine the matrix is split into runs (parts a b c) that
# each carry their own f16 row (bit-identical across runs: the reference of KL and of the paired
# intervals). Part `all` is the same 15 rows as ONE run (lockstep decoding reads each step's weights
# once for every stream, and f16 runs once), into eval_gemma3_8k_kivi_plans_NAME (NAME default matrix: the
# whole 15-row matrix).
# Usage: scripts/eval_gemma3_8k.sh [BUILD_DIR] [PART...]   (default build; parts: a b c all peer plot,
# default a b c peer plot)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; shift || true
PARTS=${*:-a b c peer plot}
NAME=${NAME:-matrix}
MODEL=models/gemma-3-270m-q4_k_m.gguf
WIKI=../shared/data/wikitext-2/test.txt
E=docs/results/eval
PY=${PYTHON:-python3}
run() {  # NAME METHODS: one mpkv eval run into $E/eval_gemma3_8k_NAME.{json,md}
  OMP_WAIT_POLICY=passive nice -n 10 "$BUILD"/mpkv eval -m $MODEL -f $WIKI -c 8192 --windows 1 --protocols decode \
    --methods "$2" --plan-dir docs/results/plans_gemma3_kivi -t 1 \
    --json "$E/eval_gemma3_8k_$1.json" --md "$E/eval_gemma3_8k_$1.md" 2>&1 | tee "$E/eval_gemma3_8k_$1_log.txt"
}
A=kivi:2,kivi:3,combined:2.5,combined:4
B=pmkvq:2.5,ratequant:2.5,pmkvq:4,ratequant:4,progressive:4
C=kivi:2.5,combined:2,combined:3,uniform:2,progressive:2
PEER=$E/peer_llamacpp_eval_gemma3_8k.json
for p in $PARTS; do
  case $p in
    a) run kivi_plans_a f16,$A ;;
    b) run kivi_plans_b f16,$B ;;
    c) run kivi_plans_c f16,$C ;;
    all) run "kivi_plans_$NAME" f16,$A,$B,$C ;;
    peer) nice -n 10 "$PY" bench/peer_llamacpp.py eval -m $MODEL -f $WIKI -c 8192 --windows 1 -t 1 \
            --kv-types f16 q8_0 q4_0 --flash-attn --json $PEER ;;
    plot) files=""  # the result files that exist (an ls of a missing one would end the script)
          for f in $E/eval_gemma3_8k.json $E/eval_gemma3_8k_kivi_plans_*.json; do
            if [[ -f $f ]]; then files+=" $f"; fi
          done
          peer=(); [[ -f $PEER ]] && peer=(--peer "$PEER")  # the peer JSON only if its run finished
          # shellcheck disable=SC2086
          "$PY" scripts/plot_eval_ci.py --eval $files "${peer[@]}" \
            --title "Gemma 3 270M, WikiText-2, one 8192-token window, decode protocol" --out $E/eval_gemma3_8k_ci.png ;;
    *) echo "eval_gemma3_8k: unknown part '$p' (a b c all peer plot)" >&2; exit 2 ;;
  esac
done

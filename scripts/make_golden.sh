#!/usr/bin/env bash
# Regenerates the golden logits of tests/golden/test_golden_logits.cpp with llama.cpp
# (llama-cpp-python), f16 KV cache, one batch; each file stores the token ids, so the test needs
# neither the text, a tokenizer nor llama.cpp.
#   smollm2_logits.json  top-20 logits at every position of the first 128 tokens of WikiText-2 test
#   gemma3_logits.json   top-20 logits at every position of 640 fixed ids (BOS 2, then a block of
#                        160 random ids repeated): longer than Gemma 3's 512-token sliding window
#   shapes/SHAPE.Q8_0.json, shapes/SHAPE.Q4_K_M.json  the real-shape GGUFs with random weights
#                        (scripts/make_shape_gguf.sh; Q4_K_M made from the Q8_0 file by llama.cpp's
#                        quantizer): top-20 logits at 64 fixed ids (BOS, then a block of 32 random ids
#                        twice) and llama.cpp's greedy 32-token continuation of SHAPE_PROMPT
# Usage: scripts/make_golden.sh [smollm2|gemma3|shapes|SHAPE|all]   (default all; SHAPE: a name
#        scripts/make_shape_gguf.sh takes, llama-3.1-8b only by name: 8.5 GB)
# Environment: PEER_PYTHON (python3), the interpreter with llama-cpp-python (scripts/install_peer.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
PY=${PEER_PYTHON:-python3}
scripts/install_peer.sh
SHAPE_PROMPT="The capital of France is"
shape_golden() {
  local shape=$1 dir=${SHAPES_DIR:-.shapes}
  scripts/make_shape_gguf.sh "$shape"
  mkdir -p tests/golden/shapes
  "$PY" bench/peer_llamacpp.py quantize -m "$dir/$shape.Q8_0.gguf" --type Q4_K_M -t 2 -o "$dir/$shape.Q4_K_M.gguf"
  for type in Q8_0 Q4_K_M; do
    "$PY" bench/peer_llamacpp.py golden -m "$dir/$shape.$type.gguf" \
      --repeated-ids --period 32 --id-low 300 --id-high 20000 --seed 13 --n-tokens 64 --top-k 20 -t 2 \
      --greedy-prompt "$SHAPE_PROMPT" --greedy-n 32 -o "tests/golden/shapes/$shape.$type.json"
  done
}
case "$which" in
  shapes) for s in llama-3.2-1b qwen2.5-1.5b qwen3-1.7b; do shape_golden "$s"; done ;;
  llama-3.2-1b|qwen2.5-1.5b|qwen3-1.7b|llama-3.1-8b) shape_golden "$which" ;;
esac
if [ "$which" = all ] || [ "$which" = smollm2 ]; then
  scripts/get_model.sh
  "$PY" bench/peer_llamacpp.py golden -m models/SmolLM2-135M-Instruct.Q4_1.gguf \
    --text ../shared/data/wikitext-2/test.txt --n-tokens 128 --top-k 20 -t 2 -o tests/golden/smollm2_logits.json
fi
if [ "$which" = all ] || [ "$which" = gemma3 ]; then
  scripts/get_model.sh gemma3-270m
  "$PY" bench/peer_llamacpp.py golden -m models/gemma-3-270m-q4_k_m.gguf \
    --repeated-ids --period 160 --id-low 300 --id-high 20000 --seed 13 --n-tokens 640 --top-k 20 -t 2 \
    -o tests/golden/gemma3_logits.json
fi

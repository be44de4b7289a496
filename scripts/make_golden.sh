#!/usr/bin/env bash
# Regenerates the golden logits of tests/golden/test_golden_logits.cpp and test_golden_shapes.cpp
# with llama.cpp, f16 KV cache, one batch; each file stores the token ids, so the test needs
# neither the text, a tokenizer nor llama.cpp.
#   smollm2_logits.json  top-20 logits at every position of the first 128 tokens of WikiText-2 test
#                        (llama-cpp-python: bench/peer_llamacpp.py golden)
#   gemma3_logits.json   top-20 logits at every position of 640 fixed ids (BOS 2, then a block of
#                        160 random ids repeated): longer than Gemma 3's 512-token sliding window
#                        (llama-cpp-python)
#   shapes/SHAPE.Q8_0.json, shapes/SHAPE.Q4_K_M.json  the real-shape GGUFs with random weights
#                        (scripts/make_shape_gguf.sh; Q4_K_M made from the Q8_0 file by the pinned
#                        tree's llama-quantize): top-20 logits at 64 fixed ids (BOS, then a block of
#                        32 random ids twice) and llama.cpp's greedy 32-token continuation of
#                        SHAPE_PROMPT, from the pinned llama.cpp tree (bench/peer/peer_logits.cpp,
#                        scripts/build_peer_logits.sh). Each file names what made it ("llama_cpp" or,
#                        for the older Q8_0 files, "llama_cpp_python").
# Usage: scripts/make_golden.sh [smollm2|gemma3|shapes|SHAPE|all]   (default all; SHAPE: a name
#        scripts/make_shape_gguf.sh takes, llama-3.1-8b only by name: 8.5 GB)
# Environment: PEER_PYTHON (python3), the interpreter with llama-cpp-python (scripts/install_peer.sh),
# for smollm2 and gemma3; SHAPE_TYPES (Q8_0 Q4_K_M), the shape goldens to remake; PEER_BUILD
# (scripts/build_peer_logits.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
PY=${PEER_PYTHON:-python3}
SHAPE_PROMPT="The capital of France is"
# The shape golden ids: BOS, then a block of 32 ids drawn uniformly from [300, 20000) by numpy's
# RandomState(13), repeated to 64 (bench/peer_llamacpp.py's --repeated-ids, whose Q8_0 goldens hold
# the same ids): the repeats make the model confident (it copies).
# `bos` is the model's BOS id (bench/peer/peer_logits.cpp reads it from the vocabulary).
shape_ids() {
  "$(scripts/shapes_env.sh)" - <<'PY'
import numpy as np
block = [int(t) for t in np.random.RandomState(13).randint(300, 20000, size=32)]
print(" ".join(["bos"] + [str(block[i % 32]) for i in range(63)]))
PY
}
shape_golden() {
  local shape=$1 dir=${SHAPES_DIR:-.shapes} build version
  build=$(scripts/build_peer_logits.sh)  # build/peer_logits and the pinned tree's llama-quantize
  version=$(basename "$build" | sed "s/^build-//")
  scripts/make_shape_gguf.sh "$shape"
  mkdir -p tests/golden/shapes
  # Default parameters, requantizing allowed: the Q8_0 weights are dequantized to f32 exactly first.
  if [ ! -f "$dir/$shape.Q4_K_M.gguf" ] || [ "$dir/$shape.Q8_0.gguf" -nt "$dir/$shape.Q4_K_M.gguf" ]; then
    "$build/bin/llama-quantize" --allow-requantize "$dir/$shape.Q8_0.gguf" "$dir/$shape.Q4_K_M.gguf.tmp" Q4_K_M 2 \
      >"$dir/$shape.Q4_K_M.log" 2>&1 || { tail -20 "$dir/$shape.Q4_K_M.log" >&2; exit 1; }
    mv "$dir/$shape.Q4_K_M.gguf.tmp" "$dir/$shape.Q4_K_M.gguf"
  fi
  for type in ${SHAPE_TYPES:-Q8_0 Q4_K_M}; do
    local model=$dir/$shape.$type.gguf out=tests/golden/shapes/$shape.$type.json
    shape_ids >"$out.ids"
    build/peer_logits "$model" "@$out.ids" 20 2 0 "$SHAPE_PROMPT" 32 >"$out.tmp"
    python3 scripts/stamp_golden.py "$out.tmp" "$model" "scripts/make_golden.sh $shape ($type)" "$version"
    rm "$out.ids"
    mv "$out.tmp" "$out"
    echo "make_golden: $out"
    # A golden judged with the exact network's logits (golden_compare.h: its ties, or
    # Judge::exact_network) has its reference file remade from the new golden's positions.
    local ref=tests/golden/shapes/$shape.$type.reference.json
    if [ -f "$ref" ]; then
      cmake --build build --target shape_reference >/dev/null
      build/shape_reference "$model" "$out" 64 "$ref" >"$ref.log"
      tail -4 "$ref.log"; rm "$ref.log"
      echo "make_golden: $ref"
    fi
  done
}
case "$which" in
  shapes) for s in llama-3.2-1b qwen2.5-1.5b qwen3-1.7b; do shape_golden "$s"; done ;;
  llama-3.2-1b|qwen2.5-1.5b|qwen3-1.7b|llama-3.1-8b) shape_golden "$which" ;;
esac
if [ "$which" = all ] || [ "$which" = smollm2 ] || [ "$which" = gemma3 ]; then
  scripts/install_peer.sh
fi
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

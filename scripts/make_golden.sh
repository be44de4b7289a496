#!/usr/bin/env bash
# Regenerates the golden logits of tests/golden/test_golden_logits.cpp with llama.cpp
# (llama-cpp-python), f16 KV cache, one batch; each file stores the token ids, so the test needs
# neither the text, a tokenizer nor llama.cpp.
#   smollm2_logits.json  top-20 logits at every position of the first 128 tokens of WikiText-2 test
#   gemma3_logits.json   top-20 logits at every position of 640 fixed ids (BOS 2, then a block of
#                        160 random ids repeated): longer than Gemma 3's 512-token sliding window
# Usage: scripts/make_golden.sh [smollm2|gemma3|all]   (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
PY=${PEER_PYTHON:-python3}
scripts/install_peer.sh
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

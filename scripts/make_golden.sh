#!/usr/bin/env bash
# Regenerates tests/golden/smollm2_logits.json: llama.cpp's top-20 logits at every position of the
# first 128 tokens of WikiText-2 test, f16 KV cache. The file stores the token ids, so the test
# needs neither the text nor llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/get_model.sh
scripts/install_peer.sh
python3 bench/peer_llamacpp.py golden -m models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --text ../shared/data/wikitext-2/test.txt --n-tokens 128 --top-k 20 -t 2 -o tests/golden/smollm2_logits.json

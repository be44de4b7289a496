#!/usr/bin/env bash
# Batched decode against llama.cpp's llama-batched-bench (bench/batched_vs_llamacpp.py says how each
# side is run): aggregate decode tok/s at widths 1,4,16,32 and depths 128 and 8192, same GGUF, threads
# and KV type. Builds the peer with scripts/build_llama_server.sh if it is not there (minutes).
# Usage: scripts/bench_batched_vs_llamacpp.sh [extra bench/batched_vs_llamacpp.py args, e.g. --kv q4 --md FILE]
# Environment: BUILD (build), THREADS (2). Never run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -x "$BUILD/mpkv" ] || scripts/setup.sh "$BUILD"
LLAMA_BIN=$(scripts/build_llama_server.sh)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
OMP_WAIT_POLICY=passive python3 bench/batched_vs_llamacpp.py --mpkv "$BUILD/mpkv" \
  --llama-batched-bench "$LLAMA_BIN/llama-batched-bench" -t "${THREADS:-2}" "$@"

#!/usr/bin/env bash
# Speed at real sizes (docs/results/speed.md, "Real shapes against llama.cpp"): on the random-weight
# GGUFs with real architectures and tensor shapes (scripts/make_shape_gguf.sh; docs/models.md) mpkv
# against llama.cpp's own llama-bench and llama-batched-bench, same file, threads and f16 KV:
#   1. prefill 512 and decode 32 tokens of one sequence at depths 128 and 4096
#      (scripts/bench_vs_llamacpp.sh: alternating rounds, medians; mpkv's roofline column);
#   2. aggregate decode of 1 / 4 / 16 sequences at depths 128 and 4096
#      (bench/batched_vs_llamacpp.py: mpkv's contexts hold random K/V, llama.cpp's are one prefilled
#      prompt copied into each sequence's own KV stream: the same decode work without 16 x 4096
#      tokens of prefill on 2 cores; mpkv's bytes and multiply-adds against the machine's probes).
# Writes docs/results/speed/shapes/SHAPE_single.md and SHAPE_batched.md. Builds the peer
# (scripts/build_llama_server.sh, minutes) if it is not there. Never run by CI.
# Usage: scripts/bench_shapes_vs_llamacpp.sh [SHAPE...]   (default: llama-3.2-1b qwen2.5-1.5b)
# Environment: THREADS (2), ROUNDS (2), REPS (3), BUILD (build), OUT_DIR (docs/results/speed/shapes).
set -euo pipefail
cd "$(dirname "$0")/.."
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(llama-3.2-1b qwen2.5-1.5b)
THREADS=${THREADS:-2}; BUILD=${BUILD:-build}
OUT_DIR=${OUT_DIR:-docs/results/speed/shapes}
[ -x "$BUILD/mpkv" ] || scripts/setup.sh "$BUILD" mpkv_cli
LLAMA_BIN=$(scripts/build_llama_server.sh)
mkdir -p "$OUT_DIR"
for shape in "${shapes[@]}"; do
  scripts/make_shape_gguf.sh "$shape"
  model=${SHAPES_DIR:-.shapes}/$shape.Q8_0.gguf
  echo "bench_shapes: $shape, load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  MODEL=$model DEPTHS=128,4096 SYNTHETIC=1 DECODE_GOAL=1.1 REPS=${REPS:-3} OUT="$OUT_DIR/${shape}_single.md" \
    scripts/bench_vs_llamacpp.sh "$THREADS" "${ROUNDS:-2}" "$BUILD"
  OMP_WAIT_POLICY=passive python3 bench/batched_vs_llamacpp.py --mpkv "$BUILD/mpkv" -m "$model" \
    --llama-batched-bench "$LLAMA_BIN/llama-batched-bench" -t "$THREADS" -r "${REPS:-3}" --synthetic \
    --peer-shared-prompt --depths 128,4096 --widths 1,4,16 --peer-widths "128:1,4,16;4096:1,4,16" \
    --md "$OUT_DIR/${shape}_batched.md"
done

#!/usr/bin/env bash
# Attention over packed pages against f16 and the read probe
# (bench_kv_attention, every format at 1K/4K/8K/32K, one run, medians), then single-sequence decode
# with a 4-bit cache against llama.cpp q4_0 with flash attention at depths 128 and 8K (`mpkv bench`
# and bench/peer_llamacpp.py batch at width 1, which also reports tokens per CPU-second).
# docs/results/kv_cache.md section 1c and docs/results/speed.md section 7 (the commands, one by one).
# Usage: scripts/bench_attention_packed.sh [BUILD=build] [PYTHON=.venv-bench/bin/python] [OUT=/tmp/mpkv_attention]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}; PY=${2:-.venv-bench/bin/python}; OUT=${3:-/tmp/mpkv_attention}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p "$OUT"
load() { echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)"; }
load | tee "$OUT/load.txt"
"$B/bench_kv_attention" --ctx 1024,4096,8192,32768 --threads 1 --layers 8 --reps 9 --shrink 0 | tee "$OUT/kv_attention.txt"
load | tee -a "$OUT/load.txt"
"$B/mpkv" bench -m "$M" -t 1 -p 64 -n 32 -d 128,8192 --synthetic -r 3 --kv-method uniform --kv-bits 4 | tee "$OUT/mpkv_uniform4.txt"
load | tee -a "$OUT/load.txt"
for D in 128 8192; do
  R=3; [ "$D" -gt 1024 ] && R=1  # each llama.cpp repetition prefills the whole depth
  "$PY" bench/peer_llamacpp.py batch -m "$M" -t 1 -d "$D" -n 32 -r "$R" --widths 1 --kv-type q4_0 --flash-attn \
    --json "$OUT/peer_q4_0_fa_$D.json" | tee "$OUT/peer_q4_0_fa_$D.txt"
  load | tee -a "$OUT/load.txt"
done

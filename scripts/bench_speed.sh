#!/usr/bin/env bash
# Issue 11 speed figures, interleaved so a shared machine's load hits every configuration alike.
# Usage: scripts/bench_speed.sh [BUILD=build] [ROUNDS=2] [BASE_BINARY]  -> raw log on stdout.
#   1. prefill 512 tokens, 1 thread: this build vs BASE_BINARY (a build of the previous main), if given;
#   2. decode aggregate tok/s vs batch width 1/2/4/8/16 (one forward call per step) at context 1K and 8K;
#   3. decode at context 1K, 1 vs 2 threads, with libgomp's default wait policy, passive, and a
#      short spin (GOMP_SPINCOUNT=10000).
# Each round runs every configuration once; `uptime` is logged before each round.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; ROUNDS=${2:-2}; BASE=${3:-}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
for r in $(seq 1 "$ROUNDS"); do
  echo "=== round $r: $(uptime)"
  if [ -n "$BASE" ]; then
    for b in "$BASE" "$BUILD/mpkv"; do
      echo "--- prefill $b"
      OMP_WAIT_POLICY=passive "$b" bench -m $M -t 1 -p 512 --ctx 128 -d 4 -r 3 | grep prefill
    done
  fi
  for n in 1 2 4 8 16; do
    echo "--- batch $n"
    OMP_WAIT_POLICY=passive "$BUILD/mpkv" bench -m $M -t 1 --synthetic --ctx 1024 8192 -d 8 -r 3 -p 16 \
      --parallel "$n" --max-batch 16 | grep decode
  done
  for policy in default passive spin10k; do
    for t in 1 2; do
      echo "--- threads $t policy $policy"
      case $policy in
        default) env -u OMP_WAIT_POLICY "$BUILD/mpkv" bench -m $M -t $t --synthetic --ctx 1024 -d 16 -r 3 -p 16 | grep decode ;;
        passive) OMP_WAIT_POLICY=passive "$BUILD/mpkv" bench -m $M -t $t --synthetic --ctx 1024 -d 16 -r 3 -p 16 | grep decode ;;
        spin10k) env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=10000 "$BUILD/mpkv" bench -m $M -t $t --synthetic --ctx 1024 -d 16 -r 3 -p 16 | grep decode ;;
      esac
    done
  done
done
echo "=== end: $(uptime)"

#!/usr/bin/env bash
# The paired speed figures of docs/results/speed.md (sections 2-4) on a shared machine: every
# comparison is a PAIR of runs back to back (reference first, then the configuration), repeated
# ROUNDS times, and the ratio of each pair is reported, so load that changes over minutes cancels; `uptime` is logged with every pair.
# Usage: scripts/bench_speed.sh [BUILD=build] [ROUNDS=2] [BASE_BINARY]  -> raw log on stdout.
#   prefill 512 tokens, 1 thread: BASE_BINARY (a build of the previous main) vs this build, if given;
#   decode aggregate tok/s at context 1K: batch width 1 vs 2/4/8/16 (one forward call per step);
#   decode at context 1K: 1 vs 2 threads, libgomp's default wait policy (OMP_DYNAMIC=false is a no-op
#   setting), passive, and GOMP_SPINCOUNT=10000.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; ROUNDS=${2:-2}; BASE=${3:-}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
decode() {  # decode tok/s at context 1K; args: env assignments... -- bench args...
  env "$@" | sed -n 's/^decode .* @ depth  1016 *\([0-9.]*\) .*tok.*/\1/p'
}
pair() {  # name, ref value, value
  echo "$1: $2 -> $3 tok/s, ratio $(python3 -c "print(f'{$3 / $2:.2f}')")  [$(uptime | sed 's/.*load/load/')]"
}
bench=("$BUILD/mpkv" bench -m $M --synthetic -d 1016 -n 16 -r 3 -p 16)  # 16 steps around context 1024
for r in $(seq 1 "$ROUNDS"); do
  echo "=== round $r"
  if [ -n "$BASE" ]; then
    a=$(OMP_WAIT_POLICY=passive "$BASE" bench -m $M -t 1 -p 512 --ctx 128 -d 4 -r 3 | sed -n 's/^prefill .* \([0-9.]*\) tok\/s/\1/p')
    b=$(OMP_WAIT_POLICY=passive "$BUILD/mpkv" bench -m $M -t 1 -p 512 -d 128 -n 4 -r 3 | sed -n 's/^prefill  *[0-9]* tokens *\([0-9.]*\) .*/\1/p')
    pair "prefill 512, 1 thread, previous main -> this build" "$a" "$b"
  fi
  for n in 2 4 8 16; do
    a=$(decode OMP_WAIT_POLICY=passive "${bench[@]}" -t 1)
    b=$(decode OMP_WAIT_POLICY=passive "${bench[@]}" -t 1 --parallel $n --max-batch 16)
    pair "decode 1K, 1 thread, batch 1 -> batch $n (aggregate)" "$a" "$b"
  done
  for policy in "OMP_DYNAMIC=false" "OMP_WAIT_POLICY=passive" "GOMP_SPINCOUNT=10000"; do  # first: libgomp defaults
    a=$(decode -u OMP_WAIT_POLICY $policy "${bench[@]}" -t 1)
    b=$(decode -u OMP_WAIT_POLICY $policy "${bench[@]}" -t 2)
    pair "decode 1K, 1 -> 2 threads, $policy" "$a" "$b"
  done
done

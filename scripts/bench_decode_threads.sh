#!/usr/bin/env bash
# Decode tok/s at 1 and 2 threads, first on the machine as it is ("idle"), then with one busy
# neighbour (a `yes` process started here, pinned to CPU 0 unless NEIGHBOUR=free, killed at the end).
# Each round runs -t 1 then -t 2 back to back (`mpkv bench`, median of 3 inside); the table gives
# the medians over ROUNDS rounds, their ratio, and the median of the per-round ratios.
# docs/results/speed.md, section 4c.
# Usage: scripts/bench_decode_threads.sh [BINARY=build/mpkv] [ROUNDS=5] [DEPTH=1024]
#   env: NEIGHBOUR=pinned|free, MPKV_POOL_SPIN_US (passed through), OMP_WAIT_POLICY (default passive)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/mpkv}; ROUNDS=${2:-5}; DEPTH=${3:-1024}
NEIGHBOUR=${NEIGHBOUR:-pinned}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
case "$NEIGHBOUR" in pinned|free) ;; *) echo "NEIGHBOUR must be pinned or free" >&2; exit 2 ;; esac

NB=""
trap 'if [ -n "$NB" ]; then kill "$NB" 2>/dev/null || true; fi' EXIT

decode() {  # decode tok/s at $1 threads
  local out
  out=$("$BIN" bench -m "$M" --synthetic -p 16 -n 32 -d "$DEPTH" -r 3 -t "$1" 2>&1) || { echo "$out" >&2; exit 1; }
  awk '/^decode/ {print $6}' <<<"$out"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }

condition() {  # $1: label
  local t1=() t2=() ratios=() a b
  for _ in $(seq 1 "$ROUNDS"); do
    a=$(decode 1); b=$(decode 2)
    t1+=("$a"); t2+=("$b"); ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b / a}')")
  done
  local m1 m2 mr
  m1=$(printf '%s\n' "${t1[@]}" | median); m2=$(printf '%s\n' "${t2[@]}" | median)
  mr=$(printf '%s\n' "${ratios[@]}" | median)
  printf '| %-28s | %6.1f | %6.1f | %5.2fx | %5.2fx | %s |\n' "$1" "$m1" "$m2" \
    "$(awk -v a="$m1" -v b="$m2" 'BEGIN {print b / a}')" "$mr" "$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "  1 thread:  ${t1[*]}" >&2
  echo "  2 threads: ${t2[*]}" >&2
}

echo "bench_decode_threads: $BIN, SmolLM2-135M Q4_1, decode 32 tokens at depth $DEPTH, $ROUNDS rounds," \
  "OMP_WAIT_POLICY=$OMP_WAIT_POLICY, MPKV_POOL_SPIN_US=${MPKV_POOL_SPIN_US:-default}; $(nproc) CPUs"
echo "| condition                    | 1 thr  | 2 thr  | 2 / 1  | median of per-round 2/1 | load after (1, 5, 15 min) |"
echo "|---|---|---|---|---|---|"
condition "as is (idle machine: goal 1.7x)"
if [ "$NEIGHBOUR" = pinned ]; then taskset -c 0 yes >/dev/null & else yes >/dev/null & fi
NB=$!
condition "busy neighbour, $NEIGHBOUR (goal 1x)"
kill "$NB"; NB=""

#!/usr/bin/env bash
# Prompt and decode tok/s of `mpkv generate` with a busy neighbour (one spinning process started
# here), under the default threads / OpenMP wait policy and the alternatives (docs/cli.md, "Threads").
# Usage: scripts/bench_threads.sh [BUILD=build] [RUNS=3] [OLD_BINARY]   (OLD_BINARY: a build from
# before the change, run with -t 0 and libgomp's default policy, for the "before" rows)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; RUNS=${2:-3}; OLD=${3:-}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
P=$(python3 -c "print('The history of the lighthouse begins with fires lit on hills. ' * 10)")
figures() { grep -o "prompt [0-9]* tokens, [0-9.]* tok/s | generated [0-9]* tokens, decode [0-9.]* tok/s"; }
python3 -c "while True: pass" & SPIN=$!
trap 'kill $SPIN' EXIT
uptime
for i in $(seq 1 "$RUNS"); do
  [ -n "$OLD" ] && echo "before, -t 0, default wait:  $(env -u OMP_WAIT_POLICY "$OLD" generate -t 0 -m $M -p "$P" -n 16 --temp 0 2>&1 | figures)"
  [ -n "$OLD" ] && echo "before, -t 1:                $(env -u OMP_WAIT_POLICY "$OLD" generate -t 1 -m $M -p "$P" -n 16 --temp 0 2>&1 | figures)"
  echo "defaults (passive):          $(env -u OMP_WAIT_POLICY "$BUILD"/mpkv generate -m $M -p "$P" -n 16 --temp 0 2>&1 | figures)"
  echo "-t 2, OMP_WAIT_POLICY=active: $(OMP_WAIT_POLICY=active "$BUILD"/mpkv generate -t 2 -m $M -p "$P" -n 16 --temp 0 2>&1 | figures)"
done
uptime

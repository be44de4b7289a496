#!/usr/bin/env bash
# CPU seconds each thread of `mpkv serve` spends on one serving level (bench/serve_bench.py, 16
# concurrent streams of 64 tokens after ~64-token prompts): the HTTP layer's cost measured where the
# machine's load cannot hide it (the engine's stepping thread vs the transport's threads).
# Prints "tid seconds" for the threads that used any CPU, busiest first.
# Usage: [PYTHON=.venv-bench/bin/python] scripts/serve_thread_cpu.sh MPKV_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$1 PY=${PYTHON:-python3} OUT=$(mktemp -d /tmp/serve_thread_cpu.XXXX)
OMP_WAIT_POLICY=passive "$BIN" serve -m models/SmolLM2-135M-Instruct.Q4_1.gguf --port 0 -t 2 -c 2048 --max-seqs 16 \
  > "$OUT/serve.log" 2>&1 &
pid=$! url=""
for _ in $(seq 600); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$OUT/serve.log" | head -1 || true)
  [ -n "$url" ] && curl -sf "$url/health" > /dev/null && break
  sleep 0.2
done
snap() { for t in /proc/$pid/task/*; do echo "$(basename "$t") $(awk '{print $14 + $15}' "$t/stat")"; done | sort; }
snap > "$OUT/before.txt"
"$PY" bench/serve_bench.py --url "$url" --label x --text ../shared/data/wikitext-2/test.txt --prompt-tokens 64 \
  --max-tokens 64 --levels 16 --requests 16 -o "$OUT/level.json" > /dev/null
snap > "$OUT/after.txt"
kill -INT $pid; wait $pid || true
join "$OUT/before.txt" "$OUT/after.txt" | awk '$3 > $2 {printf "%s %.2f\n", $1, ($3 - $2) / 100}' | sort -k2 -g -r

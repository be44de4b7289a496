#!/usr/bin/env bash
# Where the served path's time goes, short and by CPU time (docs/serving.md, "Served vs direct"):
# N chat requests x GEN tokens (the reasoning questions of bench/serve_bench.py, all at once,
# temperature 0.6, top_p 0.95, f16 KV) through `mpkv serve` + bench/serve_bench.py, then the same
# requests through `mpkv generate`. Prints served and direct output tok/s, the server's CPU seconds
# per thread during the run (utime + stime from /proc; the engine thread, the pool worker and the
# I/O thread are the top three), their voluntary / involuntary context switches, the load
# generator's CPU seconds and generate's, and both sides' CPU per output token. CPU seconds hold on a loaded machine; tok/s do not.
# PERF=1 adds `perf record -g` of the server (OUT/perf.data). Extra env for the server and generate,
# e.g. MPKV_POOL_SPIN_US=0, passes through.
# Usage: [N=8] [GEN=256] [PERF=1] scripts/bench_served_cpu.sh [MPKV] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
MPKV=${1:-build/mpkv}; OUT=${2:-out/served_cpu}; N=${N:-8}; GEN=${GEN:-256}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PYTHON:-$(scripts/bench_env.sh httpx)}
mkdir -p "$OUT"
"$PY" -c "import sys; sys.path.insert(0, 'bench'); import serve_bench
open('$OUT/prompts.txt', 'w').write(''.join(q.replace('\n', ' ') + '\n' for q in serve_bench.reasoning_questions($N)))"
printf 'The quick brown fox jumps over the lazy dog.\n%.0s' $(seq 40) > "$OUT/text.txt"  # warm-up text only
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
OMP_WAIT_POLICY=passive "$MPKV" serve -m "$MODEL" --host 127.0.0.1 --port 0 -t 2 -c $((GEN + 256)) \
  --max-seqs 64 --http-threads 80 --kv-method f16 > "$OUT/server.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2> /dev/null || true' EXIT
PORT=""
for _ in $(seq 1 300); do
  PORT=$(grep -o -E '127\.0\.0\.1:[0-9]+' "$OUT/server.log" | head -1 | cut -d: -f2 || true)
  [ -n "$PORT" ] && curl -sf -o /dev/null "http://127.0.0.1:$PORT/health" && break
  sleep 1
done
threads() { for t in /proc/$SPID/task/*; do echo "$(basename "$t") $(cut -d' ' -f14,15 "$t/stat") $(grep -h ctxt_switches "$t/status" | awk '{printf "%s ", $2}')"; done; }
threads > "$OUT/threads_before.txt"
if [ "${PERF:-0}" = 1 ]; then perf record -F 499 -g -p $SPID -o "$OUT/perf.data" > /dev/null 2>&1 & PERF_PID=$!; fi
/usr/bin/time -f "client %U user %S sys s CPU, %e s wall" "$PY" bench/serve_bench.py --url "http://127.0.0.1:$PORT" \
  --label served --text "$OUT/text.txt" --max-tokens "$GEN" --levels "$N" --requests "$N" --endpoint chat \
  --prompts questions --temperature 0.6 --top-p 0.95 --pause-s 0 -o "$OUT/result.json" > "$OUT/client.log" 2> "$OUT/client.err"
tail -1 "$OUT/client.err" | tee -a "$OUT/summary.txt"
if [ "${PERF:-0}" = 1 ]; then kill -INT $PERF_PID; wait $PERF_PID || true; fi
threads > "$OUT/threads_after.txt"
kill -INT $SPID; wait $SPID || true
trap - EXIT
"$PY" - "$OUT" << 'PYEOF' | tee -a "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
level = json.load(open(os.path.join(out, "result.json")))["levels"][0]
print(f"served: {level['output_tok_s']:.1f} output tok/s, {level['completed']} completed, {level['failed']} failed")
tick = os.sysconf("SC_CLK_TCK")
before = {l.split()[0]: [int(x) for x in l.split()[1:]] for l in open(os.path.join(out, "threads_before.txt"))}
rows = []
for l in open(os.path.join(out, "threads_after.txt")):
    tid, *v = l.split()
    d = [a - b for a, b in zip(map(int, v), before.get(tid, [0, 0, 0, 0]))]
    rows.append(((d[0] + d[1]) / tick, tid, d[2], d[3]))
rows.sort(reverse=True)
server_cpu = sum(r[0] for r in rows)
print(f"server CPU during the run: {server_cpu:.2f} s, {1e3 * server_cpu / level['output_tokens']:.3f} ms per output token")
for cpu, tid, vol, invol in rows[:4]:
    print(f"  thread {tid}: {cpu:.2f} s CPU, {vol} voluntary / {invol} involuntary switches")
PYEOF
/usr/bin/time -f "direct %U user %S sys s CPU, %e s wall" env OMP_WAIT_POLICY=passive "$MPKV" generate -m "$MODEL" \
  --prompts "$OUT/prompts.txt" --chat --ignore-eos -n "$GEN" -c $((GEN + 256)) -t 2 --temp 0.6 --top-p 0.95 --top-k 0 \
  -s 1 --kv-method f16 > "$OUT/direct.log" 2> "$OUT/direct.err"
grep -o -E "output [0-9.]+ tok/s over [0-9.]+ s" "$OUT/direct.err" | sed 's/^/direct: /' | tee -a "$OUT/summary.txt"
tail -1 "$OUT/direct.err" | tee -a "$OUT/summary.txt"
# generate's CPU (model load and weight repacking included, so an upper bound) per output token.
awk -v n=$((N * GEN)) '/^direct .* user .* sys/ {printf "direct CPU: %.3f ms per output token (load included)\n", 1e3 * ($2 + $4) / n}' \
  "$OUT/direct.err" | tee -a "$OUT/summary.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"

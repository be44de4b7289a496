#!/usr/bin/env bash
# The HTTP layer's cost, side by side: `mpkv serve` from two binaries (e.g. before and after a change
# to src/server/http_server.cpp) on the same loaded machine, alternated REPS times, each driven by
# bench/serve_bench.py (16 concurrent streams of 64 tokens after ~64-token WikiText-2 prompts,
# /v1/completions), in the order old-new, new-old, ... Also the server's CPU seconds (user + system,
# from /proc: model load, warm-up and the level), which the machine's load disturbs less. Prints each run's output tok/s and requests failed, then the medians.
# Usage: [PYTHON=.venv-bench/bin/python] scripts/bench_http_layer.sh OLD_MPKV NEW_MPKV [REPS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 REPS=${3:-3}
PY=${PYTHON:-python3}  # needs httpx (scripts/bench_serving.sh installs it into .venv-bench)
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf TEXT=../shared/data/wikitext-2/test.txt
OUT=$(mktemp -d /tmp/bench_http_layer.XXXX)
run() {  # $1 label, $2 binary, $3 run number
  local log=$OUT/$1_$3.log
  OMP_WAIT_POLICY=passive "$2" serve -m "$MODEL" --port 0 -t 2 -c 2048 --max-seqs 16 > "$log" 2>&1 &
  local pid=$! url=""
  for _ in $(seq 600); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 || true)
    [ -n "$url" ] && curl -sf "$url/health" > /dev/null && break
    sleep 0.2
  done
  "$PY" bench/serve_bench.py --url "$url" --label "$1" --text "$TEXT" --prompt-tokens 64 --max-tokens 64 \
    --levels 16 --requests 16 -o "$OUT/$1_$3.json" > /dev/null
  local cpu; cpu=$(awk '{print ($14 + $15) / 100}' /proc/$pid/stat)  # user + system seconds (100 ticks/s)
  kill -INT $pid; wait $pid || true
  python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['levels'][0]; print(sys.argv[2], sys.argv[3], f\"{s['output_tok_s']:.1f}\", s['failed'], sys.argv[4])" \
    "$OUT/$1_$3.json" "$1" "$3" "$cpu"
}
for i in $(seq "$REPS"); do  # old-new, then new-old, ... so a drifting load favours neither
  if [ $((i % 2)) -eq 1 ]; then run old "$OLD" "$i"; run new "$NEW" "$i"; else run new "$NEW" "$i"; run old "$OLD" "$i"; fi
done | tee "$OUT/runs.txt"
python3 - "$OUT/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for label in ("old", "new"):
    tok = [float(r[2]) for r in rows if r[0] == label]
    cpu = [float(r[4]) for r in rows if r[0] == label]
    print(f"{label}: median {statistics.median(tok):.1f} out tok/s, {statistics.median(cpu):.1f} CPU s in the server "
          f"(load, warm-up and the level) over {len(tok)} runs, failed {sum(int(r[3]) for r in rows if r[0] == label)}")
old, new = (statistics.median(float(r[2]) for r in rows if r[0] == l) for l in ("old", "new"))
cpu_old, cpu_new = (statistics.median(float(r[4]) for r in rows if r[0] == l) for l in ("old", "new"))
print(f"new / old: {new / old:.3f} tok/s, {cpu_new / cpu_old:.3f} server CPU seconds")
PY

#!/usr/bin/env bash
# The HTTP layer's cost, side by side: `mpkv serve` from two binaries (e.g. before and after a change
# to src/server/http_server.cpp) on the same loaded machine, alternated REPS times, each driven by
# bench/serve_bench.py (16 concurrent streams of 128 tokens after ~64-token WikiText-2 prompts,
# /v1/completions). Prints each run's output tok/s and requests failed, then the medians.
# Usage: scripts/bench_http_layer.sh OLD_MPKV NEW_MPKV [REPS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 REPS=${3:-3}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf TEXT=../shared/data/wikitext-2/test.txt
OUT=$(mktemp -d /tmp/bench_http_layer.XXXX)
run() {  # $1 label, $2 binary, $3 run number
  local log=$OUT/$1_$3.log
  OMP_WAIT_POLICY=passive "$2" serve -m "$MODEL" --port 0 -t 2 -c 1024 --max-seqs 16 > "$log" 2>&1 &
  local pid=$! url=""
  for _ in $(seq 600); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 || true)
    [ -n "$url" ] && curl -sf "$url/health" > /dev/null && break
    sleep 0.2
  done
  python3 bench/serve_bench.py --url "$url" --label "$1" --text "$TEXT" --prompt-tokens 64 --max-tokens 128 \
    --levels 16 --requests 32 -o "$OUT/$1_$3.json" > /dev/null
  kill -INT $pid; wait $pid || true
  python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['levels'][0]; print(sys.argv[2], sys.argv[3], f\"{s['output_tok_s']:.1f}\", s['failed'])" \
    "$OUT/$1_$3.json" "$1" "$3"
}
for i in $(seq "$REPS"); do run old "$OLD" "$i"; run new "$NEW" "$i"; done | tee "$OUT/runs.txt"
python3 - "$OUT/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for label in ("old", "new"):
    tok = [float(r[2]) for r in rows if r[0] == label]
    print(f"{label}: median {statistics.median(tok):.1f} out tok/s over {len(tok)} runs, failed {sum(int(r[3]) for r in rows if r[0] == label)}")
old, new = (statistics.median(float(r[2]) for r in rows if r[0] == l) for l in ("old", "new"))
print(f"new / old: {new / old:.3f}")
PY

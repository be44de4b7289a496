#!/usr/bin/env bash
# The serving demo (the README's first command): sets up (Debian packages, model, Release build of mpkv),
# calibrates a 2.5-bit combined plan for the KIVI quantizer (as scripts/demo.sh does), installs the
# Python client (`openai`, `httpx`) with pip into .venv-bench, then starts `mpkv serve` twice under
# the same KV budget (4 sequences of the workload at 16 bits): once with the f16 cache, once with
# the plan. Each time 16 short reasoning chat requests, 512 generated tokens each (the long-generation
# case the cache is for), go to the server at once through the openai client, and one line says how
# many ran at once, the output tok/s, the peak KV bytes and the lowest effective bits
# (bench/demo_serve.py). When scripts/build_llama_server.sh has built llama.cpp's llama-server, it
# runs the same requests at the same KV bytes (f16 and q4_0 KV) for comparison; a llama-server that
# fails to start is said on its row (with its log) and left out, mpkv's rows standing.
# A few minutes on 2 idle cores once built. DEMO_PLAN=FILE skips calibration; DEMO_REQUESTS (16),
# DEMO_MAX_TOKENS (512), DEMO_THREADS (2), LLAMA_SERVER (the built binary, if any).
# Outputs (plan, calibration and server logs) in out/demo_serve/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build mpkv_cli  # the demo needs only the mpkv binary
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=out/demo_serve
T=${DEMO_THREADS:-2}
mkdir -p "$OUT"
PY=$(scripts/bench_env.sh openai httpx)
PLAN=${DEMO_PLAN:-}
if [ -z "$PLAN" ]; then
  if [ -f ../shared/data/wikitext-2/test.txt ]; then
    tail -c 300000 ../shared/data/wikitext-2/test.txt > "$OUT/calib.txt"
  else
    cat README.md docs/*.md docs/results/*.md > "$OUT/calib.txt"
  fi
  # The log kept whole: a failed calibration ends the demo (a `| grep || true` would hide it).
  build/mpkv calibrate -m "$MODEL" --method combined --avg-bits 2.5 --quantizer kivi -o "$OUT/combined_2.5.json" \
    --calib-file "$OUT/calib.txt" --calib-n 4 --calib-len 512 --pi-scale 4 -t "$T" > "$OUT/calibrate.log" 2>&1 ||
    { tail -n 20 "$OUT/calibrate.log"; echo "demo_serve: calibration failed (log: $OUT/calibrate.log)"; exit 1; }
  grep -E "^plan|^time" "$OUT/calibrate.log" || true
  PLAN=$OUT/combined_2.5.json
fi
echo
# The peer is optional: looked up with a glob (no command that can fail and end the script).
if [ -z "${LLAMA_SERVER:-}" ]; then
  for bin in .peer/build-*/bin/llama-server; do
    if [ -x "$bin" ]; then LLAMA_SERVER=$bin; break; fi
  done
fi
if [ -n "${LLAMA_SERVER:-}" ]; then
  echo "llama-server: $LLAMA_SERVER (compared at the same KV bytes)"
else
  echo "llama-server not built (scripts/build_llama_server.sh builds it): comparing mpkv configurations only"
fi
OMP_WAIT_POLICY=passive "$PY" bench/demo_serve.py --mpkv build/mpkv -m "$MODEL" --plan "$PLAN" \
  -t "$T" -n "${DEMO_REQUESTS:-16}" --max-tokens "${DEMO_MAX_TOKENS:-512}" --out-dir "$OUT" \
  ${LLAMA_SERVER:+--llama-server "$LLAMA_SERVER"}

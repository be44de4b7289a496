#!/usr/bin/env bash
# Serving benchmark (docs/results/serving.md, "Method" and section 1): mpkv serve with the f16, KIVI-2,
# progressive-2 and combined-plan caches, and llama_cpp.server with q8_0 and q4_0 KV caches, all
# under one KV byte budget (4 f16 sequences of the workload), each driven by bench/serve_bench.py
# at concurrency 1, 4, 16 and 64 with prompts of ~1024 tokens of WikiText-2 test and 512 generated
# tokens. Writes docs/results/serving/ (one JSON per configuration, server logs, tables.md,
# effective_bits.png).
#
# Sizing (2 shared cores): each level sends as many requests as its concurrency (one wave) and is
# time-boxed to LEVEL_SECONDS (default 60 s): requests still streaming then are cancelled and counted
# as cut (not failed). About 3 minutes per configuration, under 20 minutes for the six.
# --quick: prompts of ~256 tokens, 128 generated, levels 1,4,16, boxes of 45 s (about 10 minutes).
#
# Usage: scripts/bench_serving.sh [--quick] [OUT_DIR]
# Environment: BUILD (build), THREADS (2), CONFIGS (serve_sweep.py --configs), LEVELS, PROMPT_TOKENS,
# MAX_TOKENS, REQUESTS (per level, 0: its concurrency), LEVEL_SECONDS, PLAN (combined plan file),
# TEXT (prompt source; default ../shared/data/wikitext-2/test.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
OUT=${1:-docs/results/serving}
BUILD=${BUILD:-build}
PLAN=${PLAN:-docs/results/plans_kivi/combined_2.5.json}
if [ $QUICK = 1 ]; then
  : "${PROMPT_TOKENS:=256}" "${MAX_TOKENS:=128}" "${LEVELS:=1,4,16}" "${LEVEL_SECONDS:=45}"
  [ "$OUT" = docs/results/serving ] && OUT=out/serving_quick
fi
CONFIGS=${CONFIGS:-f16,kivi-2,progressive-2,plan:$PLAN,llamacpp-q8_0,llamacpp-q4_0}
[ -x "$BUILD/mpkv" ] || scripts/setup.sh "$BUILD"
PY=$(scripts/bench_env.sh httpx matplotlib)
if [[ $CONFIGS == *llamacpp* ]] && ! "$PY" -c "import llama_cpp.server" 2>/dev/null; then
  echo "bench_serving: installing llama-cpp-python[server] (compiled from source if absent: several minutes)"
  scripts/bench_env.sh "llama-cpp-python[server]" >/dev/null
fi
echo "bench_serving: load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
OMP_WAIT_POLICY=passive "$PY" bench/serve_sweep.py --mpkv "$BUILD/mpkv" -t "${THREADS:-2}" --configs "$CONFIGS" \
  --text "${TEXT:-../shared/data/wikitext-2/test.txt}" \
  --prompt-tokens "${PROMPT_TOKENS:-1024}" --max-tokens "${MAX_TOKENS:-512}" --levels "${LEVELS:-1,4,16,64}" \
  --requests "${REQUESTS:-0}" --level-seconds "${LEVEL_SECONDS:-60}" --out-dir "$OUT"
echo "bench_serving: load after the run: $(cut -d' ' -f1-3 /proc/loadavg)"

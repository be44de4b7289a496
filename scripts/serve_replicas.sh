#!/usr/bin/env bash
# Scale-out (checked in docs/results/serving.md section 4): N mpkv serve replicas on loopback behind
# the SGLang Model Gateway (`smg` from PyPI, installed here into .venv-bench) with the cache-aware
# policy and /health polling, and the serving benchmark replayed through the gateway
# (bench/serve_replicas.py). Each replica gets its own KV budget and THREADS threads; on 2 cores, 2
# replicas of 1 thread.
# Usage: scripts/serve_replicas.sh [N] [OUT_DIR]
# Environment: BUILD (build), THREADS (1), BUDGET_MIB (per replica; default 4 f16 sequences of the
# workload), KV ("--kv-plan docs/results/plans_kivi/combined_2.5.json"), POLICY (cache_aware),
# LEVELS (1,4,16), PROMPT_TOKENS (1024), MAX_TOKENS (512), LEVEL_SECONDS (90), TEXT (prompt source).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2}
OUT=${2:-out/replicas}
BUILD=${BUILD:-build}
[ -x "$BUILD/mpkv" ] || scripts/setup.sh "$BUILD"
PY=$(scripts/bench_env.sh httpx smg)
SMG=$(dirname "$PY")/smg
P=${PROMPT_TOKENS:-1024}
G=${MAX_TOKENS:-512}
BUDGET=${BUDGET_MIB:-$("$PY" -c "import sys; sys.path.insert(0, 'bench'); import serve_sweep; \
print(serve_sweep.f16_budget_mib('$BUILD/mpkv', 'models/SmolLM2-135M-Instruct.Q4_1.gguf', $P + $G + 64, 1))")}
KV_ARGS=()
for x in ${KV:---kv-plan docs/results/plans_kivi/combined_2.5.json}; do KV_ARGS+=("--kv-arg=$x"); done
echo "serve_replicas: $N replicas, KV budget $BUDGET MiB each; load $(cut -d' ' -f1-3 /proc/loadavg)"
OMP_WAIT_POLICY=passive "$PY" bench/serve_replicas.py --mpkv "$BUILD/mpkv" --smg "$SMG" --policy "${POLICY:-cache_aware}" \
  -n "$N" -t "${THREADS:-1}" --budget-mib "$BUDGET" "${KV_ARGS[@]}" --prompt-tokens "$P" --max-tokens "$G" \
  --levels "${LEVELS:-1,4,16}" --level-seconds "${LEVEL_SECONDS:-90}" --out-dir "$OUT" \
  --text "${TEXT:-../shared/data/wikitext-2/test.txt}"

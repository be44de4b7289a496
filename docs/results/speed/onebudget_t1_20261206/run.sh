#!/bin/bash
# 1-thread runs for docs/results/speed.md section 13 (the 2-thread runs: ../onebudget_20261206/run.sh;
# the same budgets, caches and step counts; SmolLM2 at 8192 with 1 thread is in that folder too).
cd "$(dirname "$0")/../../../.."
B=${B:-build}
S="f16|--kv-method f16;kivi-2|--kv-method kivi --kv-bits 2;progressive-2|--kv-method progressive --kv-bits 2"
O=${O:-out/onebudget_t1}
mkdir -p $O
run() { # name, env...   (RUNS="name ...": only those)
  local name=$1; shift
  [[ -z ${RUNS:-} || " $RUNS " == *" $name "* ]] || return 0
  echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  env "$@" RAW=$O/$name OUT=$O/$name.json scripts/bench_budget.sh $B 1 ${CTX} 2>&1 | tee $O/$name.md
}
CTX=8192 run gemma3_8k_t1 ROUNDS=1 N=32 MODEL=models/gemma-3-270m-q4_k_m.gguf CONFIGS="$S;plan|--kv-plan docs/results/plans_gemma3_kivi/combined_2.5.json"
CTX=32768 run gemma3_32k_t1 ROUNDS=1 N=16 MODEL=models/gemma-3-270m-q4_k_m.gguf CONFIGS="$S;plan|--kv-plan docs/results/plans_gemma3_kivi/combined_2.5.json"
CTX=32768 run smollm2_32k_t1 ROUNDS=1 N=16 BUDGET_MIB=2924 CONFIGS="$S;plan|--kv-plan docs/results/plans_kivi/combined_2.5.json"
echo "== done $(date -u +%H:%M:%S)"

#!/bin/bash
# Idle-window runs for docs/results/speed.md section 13 (one budget at 8192 / 32768, SmolLM2 and Gemma 3).
cd /work/main
B=${B:-build}
S="f16|--kv-method f16;kivi-2|--kv-method kivi --kv-bits 2;progressive-2|--kv-method progressive --kv-bits 2"
O=out/onebudget
run() { # name, env...
  local name=$1; shift
  echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  env "$@" RAW=$O/$name OUT=$O/$name.json scripts/bench_budget.sh $B 2 ${CTX} 2>&1 | tee $O/$name.md
}
CTX=8192 run smollm2_8k ROUNDS=3 N=32 BUDGET_MIB=731 CONFIGS="$S;plan|--kv-plan docs/results/plans_kivi/combined_2.5.json"
CTX=32768 run smollm2_32k ROUNDS=1 N=16 BUDGET_MIB=2924 CONFIGS="$S;plan|--kv-plan docs/results/plans_kivi/combined_2.5.json"
CTX=8192 run gemma3_8k ROUNDS=1 N=32 MODEL=models/gemma-3-270m-q4_k_m.gguf CONFIGS="$S;plan|--kv-plan docs/results/plans_gemma3_kivi/combined_2.5.json"
CTX=32768 run gemma3_32k ROUNDS=1 N=16 MODEL=models/gemma-3-270m-q4_k_m.gguf CONFIGS="$S;plan|--kv-plan docs/results/plans_gemma3_kivi/combined_2.5.json"
echo "== done $(date -u +%H:%M:%S)"

#!/usr/bin/env bash
# Throughput under one fixed KV budget (docs/results/eval.md section 4; PM-KVQ's 2.73-5.18x anchor):
# the budget holds 4 sequences at fp16 for a context of C tokens; `mpkv bench --parallel 0` admits as many
# sequences as it holds for their whole context (PagedKvCache::sequence_bytes_bound) under each
# cache, fills them (random K/V, --synthetic: decode speed does not depend on content) and times
# D decode steps of all of them together (one forward call per step). Prints one line per
# cache and writes docs/results/eval/budget_throughput.json.
# Usage: scripts/bench_budget.sh [BUILD_DIR] [THREADS] [CONTEXT]   (defaults build 2 2048)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
T=${2:-2}
C=${3:-2048}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
PLANS=docs/results/plans
OUT=docs/results/eval
mkdir -p "$OUT"
TMP=$(mktemp -d)
# fp16 bytes of one sequence of C + 16 tokens (all bytes counted), times 4: ask the f16 cache itself
# (a 100 MiB probe admits a couple of sequences and prints the bound per sequence).
F16_MIB=$($BUILD/mpkv bench -m $MODEL -t $T --synthetic -d $C -n 16 -r 1 -p 16 --parallel 0 --kv-budget-mib 100 \
  --kv-method f16 | sed -n 's/.*(\([0-9.]*\) MiB each at most;.*/\1/p')
BUDGET=$(python3 -c "print(round(4 * $F16_MIB + 0.05, 1))")
echo "budget: 4 x $F16_MIB MiB = $BUDGET MiB (fp16, context $C + 16)"
run() {  # label, options...
  local label=$1; shift
  $BUILD/mpkv bench -m $MODEL -t $T --synthetic -d $C -n 16 -r 2 -p 16 --parallel 0 --kv-budget-mib $BUDGET "$@" \
    --json "$TMP/$label.json" > "$TMP/$label.txt"
  python3 - "$label" "$TMP/$label.json" "$*" <<'PY'
import json, sys
label, path, opts = sys.argv[1], sys.argv[2], sys.argv[3]
d = json.load(open(path))["decode"][0]
print(json.dumps({"cache": label, "options": opts, "sequences": d["sequences"], "tok_s": d["tok_s"], "kv_mib_peak": d["kv_mib"]}))
PY
}
{
  run f16 --kv-method f16
  run kivi-2 --kv-method kivi --kv-bits 2
  run progressive-2 --kv-method progressive --kv-bits 2
  run ratequant-2.5 --kv-plan $PLANS/ratequant_2.5.json
  run combined-2.5 --kv-plan $PLANS/combined_2.5.json
  run ratequant-2 --kv-plan $PLANS/ratequant_2.json
  run combined-2 --kv-plan $PLANS/combined_2.json
} | tee "$TMP/lines.jsonl"
python3 - "$TMP/lines.jsonl" "$OUT/budget_throughput.json" "$BUDGET" "$C" "$T" "scripts/bench_budget.sh $BUILD $T $C" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
f16 = next(r for r in rows if r["cache"] == "f16")
for r in rows:
    r["sequences_vs_f16"] = r["sequences"] / f16["sequences"]
    r["tok_s_vs_f16"] = r["tok_s"] / f16["tok_s"]
out = {"command": sys.argv[6], "budget_mib": float(sys.argv[3]),
       "context": int(sys.argv[4]), "threads": int(sys.argv[5]), "rows": rows}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print("| cache | sequences admitted | x f16 | aggregate decode tok/s | x f16 | peak KV MiB |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['cache']} | {r['sequences']} | {r['sequences_vs_f16']:.2f} | {r['tok_s']:.1f} | {r['tok_s_vs_f16']:.2f} | {r['kv_mib_peak']:.1f} |")
PY
rm -rf "$TMP"

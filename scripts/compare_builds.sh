#!/usr/bin/env bash
# Greedy outputs and eval rows of two builds, compared bit for bit (a refactor must not change a
# token or a digit). Runs the same fixed commands with BUILD_A/mpkv and BUILD_B/mpkv one after
# the other and diffs: generated text of `generate --temp 0` (f16, kivi-2, progressive-2 under a
# budget that makes pages shrink, a calibrated plan, --parallel 4 under a budget that holds
# fewer sequences than that, so admission queues them, and prompts sharing a prefix through the
# prefix cache under a tight budget), and the scored figures of one `ppl` and
# one `eval` run (timings, paths and the command line dropped). About 8 minutes on 2 loaded cores.
# Usage:
#   scripts/compare_builds.sh BUILD_A BUILD_B [OUT=/tmp/mpkv_compare] [THREADS=2]
# Exit 0 when everything is identical; 1 with the differing files named.
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1; B=$2; OUT=${3:-/tmp/mpkv_compare}; T=${4:-2}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=../shared/data/wikitext-2/test.txt
PLAN=docs/results/plans_kivi/combined_2.5.json
PROMPT="The history of the printing press begins"
GEN="generate -m $MODEL -p \"$PROMPT\" -n 96 --temp 0 -t $T --ignore-eos"
declare -A RUNS=(
  [gen_f16]="$GEN"
  [gen_kivi2]="$GEN --kv-method kivi --kv-bits 2 --kv-window 16"
  [gen_progressive2]="$GEN --kv-method progressive --kv-bits 2 --kv-window 16 --kv-budget-mib 4"
  [gen_plan]="$GEN --kv-plan $PLAN --kv-window 16 --kv-page 32 --kv-budget-mib 2.3"
  [gen_prefix_shared]="generate -m $MODEL --prompts $OUT/prefix_prompts.txt -n 48 --temp 0 -t $T --ignore-eos --kv-method progressive --kv-bits 2 --kv-window 16 --kv-budget-mib 4 --prefix-cache-floor-bits 4"
  [gen_parallel4]="$GEN --parallel 4 --kv-method progressive --kv-bits 2 --kv-window 16 --kv-budget-mib 8"
  [ppl_progressive2]="ppl -m $MODEL -f $TEXT -c 256 --chunks 2 -t $T --kv-method progressive --kv-bits 2 --kv-window 32 --json @OUT@.json"
  [eval_kivi_progressive]="eval -m $MODEL -f $TEXT --methods kivi,progressive --bits 2 -c 256 --windows 2 -t $T --json @OUT@.json"
)
# Six prompts sharing a long first part, decoded together under a budget that makes pages shrink,
# so later prompts read the first ones' cached pages (645 of 930 prompt tokens) as they shrink.
mkdir -p "$OUT"
SHARED=$(printf 'The archive keeps a record of every ship that entered the harbour, its cargo, its crew and the weather of that day. %.0s' 1 2 3 4 5 6)
for i in 1 2 3 4 5 6; do echo "$SHARED Entry $i describes"; done > "$OUT/prefix_prompts.txt"
fail=0
for name in $(printf '%s\n' "${!RUNS[@]}" | sort); do
  for side in A B; do
    build=$([ $side = A ] && echo "$A" || echo "$B")
    dir=$OUT/$side; mkdir -p "$dir"
    cmd=${RUNS[$name]//@OUT@/$dir/$name}
    eval "\"$build/mpkv\" $cmd" > "$dir/$name.txt" 2> "$dir/$name.err" || { echo "$name ($side) failed: see $dir/$name.err"; fail=1; }
    if [ -f "$dir/$name.json" ]; then  # keep the scored figures, drop timings
      python3 - "$dir/$name.json" <<'PY'
import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if not any(w in k for w in ("second", "tok_s", "time", "date", "threads", "load", "command"))}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
p = sys.argv[1]
json.dump(strip(json.load(open(p))), open(p + ".scored", "w"), indent=1, sort_keys=True)
PY
    fi
  done
  # generate: its text; ppl / eval: their scored figures (their text holds timings and paths)
  for f in "$name.txt" "$name.json.scored"; do
    [ -f "$OUT/A/$f" ] || continue
    [ "$f" = "$name.txt" ] && [ -f "$OUT/A/$name.json.scored" ] && continue
    if cmp -s "$OUT/A/$f" "$OUT/B/$f"; then echo "same     $f"; else echo "DIFFERS  $f"; fail=1; fi
  done
done
exit $fail

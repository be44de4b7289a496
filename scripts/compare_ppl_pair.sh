#!/usr/bin/env bash
# One perplexity comparison, mpkv vs llama.cpp (llama-cpp-python), on the same GGUF, tokens and
# protocol (windows of CTX, BOS first when the model adds it, second half scored, f16 KV cache),
# run one after the other at THREADS threads. Writes OUT/mpkv_c<CTX>.json, OUT/llama_c<CTX>.json
# and prints one markdown row. Usage:
#   scripts/compare_ppl_pair.sh MODEL CTX CHUNKS THREADS OUT [BUILD=build] [PYTHON=python3]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$1; CTX=$2; CHUNKS=$3; THREADS=$4; OUT=$5; BUILD=${6:-build}; PY=${7:-python3}
TEXT=../shared/data/wikitext-2/test.txt
mkdir -p "$OUT"
"$BUILD"/mpkv ppl -m "$MODEL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" --json "$OUT/mpkv_c$CTX.json"
"$PY" bench/peer_llamacpp.py ppl -m "$MODEL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" --json "$OUT/llama_c$CTX.json"
"$PY" - "$OUT" "$CTX" <<'PY'
import json, sys
out, ctx = sys.argv[1:]
m = json.load(open(f"{out}/mpkv_c{ctx}.json")); l = json.load(open(f"{out}/llama_c{ctx}.json"))
assert m["scored"] == l["scored"], "the two tools scored different numbers of tokens"
rel = (m["ppl"] - l["ppl"]) / l["ppl"] * 100
print(f"| {ctx} | {m['chunks']} ({m['tokens_used']} of {m['tokens_in_file']}; llama.cpp {l['tokens_in_file']}) | "
      f"{m['scored']} | {m['ppl']:.4f} +/- {m['ppl_stderr']:.4f} | {l['ppl']:.4f} +/- {l['ppl_stderr']:.4f} | "
      f"{rel:+.3f}% | {m['seconds']:.0f} / {l['seconds']:.0f} |")
PY

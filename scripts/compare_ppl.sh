#!/usr/bin/env bash
# Perplexity of mpkv and llama.cpp (llama-cpp-python) on the same tokens and protocol
# (WikiText-2 test, windows of CTX, second half scored, f16 KV cache), side by side.
# Usage: scripts/compare_ppl.sh [CTX=512] [CHUNKS=60] [BUILD=build]
# Writes docs/results/ppl_vs_llamacpp.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CTX=${1:-512}; CHUNKS=${2:-60}; BUILD=${3:-build}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=../shared/data/wikitext-2/test.txt
scripts/get_model.sh
scripts/install_peer.sh
out=$(mktemp -d)
"$BUILD"/mpkv ppl -m "$MODEL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$(nproc)" --json "$out/mpkv.json"
python3 bench/peer_llamacpp.py ppl -m "$MODEL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$(nproc)" --json "$out/llama.json"
python3 - "$out" "$CTX" "$CHUNKS" <<'PY'
import json, sys
out, ctx, chunks = sys.argv[1:]
m = json.load(open(f"{out}/mpkv.json")); l = json.load(open(f"{out}/llama.json"))
rel = (m["ppl"] - l["ppl"]) / l["ppl"] * 100
lines = [
 "# Perplexity: mpkv vs llama.cpp (same GGUF, same tokens, same protocol)", "",
 f"Command: `scripts/compare_ppl.sh {ctx} {chunks}`", "",
 f"SmolLM2-135M-Instruct Q4_1, WikiText-2 test, windows of {ctx} tokens, second half scored, f16 KV cache, "
 f"first {m['chunks']} windows ({m['tokens_used']} of {m['tokens_in_file']} tokens; llama.cpp tokenized {l['tokens_in_file']}).", "",
 "| engine | PPL | +/- | scored tokens | seconds |", "|---|---|---|---|---|",
 f"| mpkv | {m['ppl']:.4f} | {m['ppl_stderr']:.4f} | {m['scored']} | {m['seconds']:.0f} |",
 f"| llama.cpp (llama-cpp-python) | {l['ppl']:.4f} | {l['ppl_stderr']:.4f} | {l['scored']} | {l['seconds']:.0f} |", "",
 f"Relative difference: {rel:+.3f}% (goal: within 1%).", ""]
open("docs/results/ppl_vs_llamacpp.md", "w").write("\n".join(lines))
print("\n".join(lines))
PY

#!/usr/bin/env bash
# Engine speed side by side with llama.cpp (llama-cpp-python) on the same GGUF, thread count and
# token ids: prefill of a 512-token prompt, decode of 32 tokens at depths 128 and 4096, f16 KV cache.
# The two engines run alternately ROUNDS times (each run reports a median of REPS, default 3); the table
# quotes the median over rounds. Usage: scripts/bench_vs_llamacpp.sh [THREADS=2] [ROUNDS=2] [BUILD=build]
# Writes docs/results/engine_speed.md.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; ROUNDS=${2:-2}; BUILD=${3:-build}; REPS=${REPS:-3}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
scripts/get_model.sh
scripts/install_peer.sh
out=$(mktemp -d)
for r in $(seq 1 "$ROUNDS"); do
  "$BUILD"/mpkv bench -m "$MODEL" -t "$THREADS" -d 128,4096 -r "$REPS" --json "$out/mpkv_$r.json"
  python3 bench/peer_llamacpp.py bench -m "$MODEL" -t "$THREADS" -d 128,4096 -r "$REPS" --json "$out/llama_$r.json"
done
python3 - "$out" "$ROUNDS" "$THREADS" "$REPS" <<'PY'
import json, sys, statistics, platform, subprocess
out, rounds, threads, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def med(engine, key):
    vals = []
    for r in range(1, rounds + 1):
        j = json.load(open(f"{out}/{engine}_{r}.json"))
        vals.append(j["prefill"]["tok_s"] if key == "prefill" else next(d["tok_s"] for d in j["decode"] if d["context"] == key))
    return statistics.median(vals)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = [("prefill 512 tokens", "prefill", 0.3), ("decode 32 @ depth 128", 128, 0.7), ("decode 32 @ depth 4096", 4096, 0.7)]
lines = ["# Engine speed: mpkv vs llama.cpp", "",
         f"Command: `REPS={reps} scripts/bench_vs_llamacpp.sh {threads} {rounds}`", "",
         f"SmolLM2-135M-Instruct Q4_1, f16 KV cache, {threads} threads, CPU: {cpu} ({platform.machine()}). "
         f"Same token ids in both engines; each figure is the median over {rounds} alternating rounds of a "
         f"median of {reps} run(s). llama.cpp is llama-cpp-python (built from source on this machine), called "
         "token by token from Python for decode, flash attention off (its default).", "",
         "| measure | mpkv tok/s | llama.cpp tok/s | ratio | goal |", "|---|---|---|---|---|"]
for name, key, goal in rows:
    m, l = med("mpkv", key), med("llama", key)
    lines.append(f"| {name} | {m:.1f} | {l:.1f} | {m / l:.2f}x | >= {goal}x |")
lines.append("")
open("docs/results/engine_speed.md", "w").write("\n".join(lines))
print("\n".join(lines))
PY

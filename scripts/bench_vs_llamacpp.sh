#!/usr/bin/env bash
# Engine speed side by side with llama.cpp (llama-bench, or llama-cpp-python) on the same GGUF, thread count and
# token ids: prefill of a 512-token prompt, decode of 32 tokens at depths DEPTHS (default 128,4096), f16 KV
# cache. The two engines run alternately ROUNDS times (each run reports a median of REPS, default 3); the
# table quotes the median over rounds. Both fill the decode depths by untimed prefill; SYNTHETIC=1 lets mpkv
# fill them with random K/V instead (`mpkv bench --synthetic`: same decode work, no 8K prefill per run).
# Usage: [MODEL=...] [DEPTHS=128,4096] [OUT=...] [REPS=3] [SYNTHETIC=0] [DECODE_GOAL=0.7] scripts/bench_vs_llamacpp.sh
# [THREADS=2] [ROUNDS=2] [BUILD=build]. Writes OUT (default docs/results/engine_speed.md, SmolLM2's table);
# Gemma 3: MODEL=models/gemma-3-270m-q4_k_m.gguf DEPTHS=128,8192 SYNTHETIC=1 DECODE_GOAL=1.0
#   OUT=docs/results/speed/gemma3_vs_llamacpp.md (the Gemma 3 goal, decode >= 1.0x llama.cpp: docs/results/
#   engine_speed.md, "Gemma 3 at depths 128 and 8192").
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; ROUNDS=${2:-2}; BUILD=${3:-build}; REPS=${REPS:-3}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
DEPTHS=${DEPTHS:-128,4096}
OUT=${OUT:-docs/results/engine_speed.md}
FILL=(); [ "${SYNTHETIC:-0}" = 1 ] && FILL=(--synthetic)
case "$MODEL" in *gemma-3-270m*) scripts/get_model.sh gemma3-270m ;; *) scripts/get_model.sh ;; esac
# The peer: llama.cpp's own llama-bench (PEER=llama-bench, the default; scripts/build_llama_server.sh
# builds it) or llama-cpp-python (PEER=python; scripts/install_peer.sh).
PEER=${PEER:-llama-bench}
if [ "$PEER" = llama-bench ]; then LLAMA_BIN=$(scripts/build_llama_server.sh); else scripts/install_peer.sh; fi
out=$(mktemp -d)
for r in $(seq 1 "$ROUNDS"); do
  OMP_WAIT_POLICY=passive "$BUILD"/mpkv bench -m "$MODEL" -t "$THREADS" -d "$DEPTHS" "${FILL[@]}" -r "$REPS" \
    --json "$out/mpkv_$r.json"
  if [ "$PEER" = llama-bench ]; then
    python3 bench/peer_llama_bench.py --llama-bench "$LLAMA_BIN/llama-bench" -m "$MODEL" -t "$THREADS" -d "$DEPTHS" \
      -r "$REPS" --json "$out/llama_$r.json"
  else
    python3 bench/peer_llamacpp.py bench -m "$MODEL" -t "$THREADS" -d "$DEPTHS" -r "$REPS" --json "$out/llama_$r.json"
  fi
done
python3 - "$out" "$ROUNDS" "$THREADS" "$REPS" "$MODEL" "$DEPTHS" "$OUT" "${SYNTHETIC:-0}" "${DECODE_GOAL:-0.7}" "$PEER" <<'PY'
import json, os, sys, statistics, platform, subprocess
out, rounds, threads, reps, model, depths, dest = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
synthetic, decode_goal, peer = sys.argv[8] == "1", float(sys.argv[9]), sys.argv[10]
def med(engine, key, field="tok_s"):  # field: tok_s (wall) or cpu_tok_s (decode only)
    vals = []
    for r in range(1, rounds + 1):
        j = json.load(open(f"{out}/{engine}_{r}.json"))
        vals.append(j["prefill"][field] if key == "prefill" else next(d[field] for d in j["decode"] if d["context"] == key))
    return statistics.median(vals)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = [("prefill 512 tokens", "prefill", 0.3)] + [(f"decode 32 @ depth {d}", int(d), decode_goal) for d in depths.split(",")]
lines = ["# Engine speed: mpkv vs llama.cpp", "",
         f"Command: `PEER={peer} MODEL={model} DEPTHS={depths} OUT={dest} REPS={reps} SYNTHETIC={int(synthetic)} DECODE_GOAL={decode_goal:g} scripts/bench_vs_llamacpp.sh {threads} {rounds}`",
         "", f"{os.path.basename(model)}, f16 KV cache, {threads} threads, CPU: {cpu} ({platform.machine()}). "
         f"Same token ids in both engines; each figure is the median over {rounds} alternating rounds of a "
         f"median of {reps} run(s). "
         + ("llama.cpp is its own llama-bench (scripts/build_llama_server.sh; the mean of its repetitions), "
            "flash attention off; its tokens per CPU-second are not measured." if peer == "llama-bench" else
            "llama.cpp is llama-cpp-python (built from source on this machine), called "
            "token by token from Python for decode, flash attention off (its default).")
         + (" mpkv's decode contexts hold random K/V (--synthetic), llama.cpp's prefilled ones." if synthetic else ""), "",
         "| measure | mpkv tok/s | llama.cpp tok/s | ratio | goal | mpkv tok/CPU-s | llama.cpp tok/CPU-s | CPU ratio | mpkv GB/s read (% probe) | binds |",
         "|---|---|---|---|---|---|---|---|---|---|"]
def roofline(key):  # mpkv's roofline of the median round's decode at depth `key` (mpkv bench's "roofline")
    runs = sorted((next(d for d in json.load(open(f"{out}/mpkv_{r}.json"))["decode"] if d["context"] == key)
                   for r in range(1, rounds + 1)), key=lambda d: d["tok_s"])
    f = runs[len(runs) // 2]["roofline"]
    return f" {f['gb_s']:.1f} ({100 * f['read_probe_fraction']:.0f}%) | {f['binds']} |"
for name, key, goal in rows:
    m, l = med("mpkv", key), med("llama", key)
    cpu = ""
    if key != "prefill" and peer != "llama-bench":  # tokens per CPU-second: what a shared machine's load distorts least
        mc, lc = med("mpkv", key, "cpu_tok_s"), med("llama", key, "cpu_tok_s")
        cpu = f" {mc:.1f} | {lc:.1f} | {mc / lc:.2f}x |"
    lines.append(f"| {name} | {m:.1f} | {l:.1f} | {m / l:.2f}x | >= {goal}x |{cpu or ' | | |'}"
                 + (roofline(key) if key != "prefill" else " | |"))
lines.append("")
lines.append(f"Load average at the end: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[2]:.2f} (15 min).")
lines.append("")
open(dest, "w").write("\n".join(lines))
print("\n".join(lines))
PY

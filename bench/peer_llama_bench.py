#!/usr/bin/env python3
"""llama.cpp's own `llama-bench` (scripts/build_llama_server.sh) as the speed peer of `mpkv bench`:
prefill of -p tokens, and decode of -n tokens after a cache already holding each depth (llama-bench
-d), with the same thread count, KV type and flash-attention setting. Writes the JSON shape of
`bench/peer_llamacpp.py bench` (prefill tok/s, decode tok/s per depth), so scripts/bench_vs_llamacpp.sh
reads either. llama-bench reports the mean over its -r repetitions (avg_ts), not a median; its
tokens per CPU-second are not measured (null).
"""
import argparse
import json
import subprocess
import sys


def llama_bench(binary, model, threads, reps, kv_type, flash_attn, prompt, n_gen, depth):
    argv = [binary, "-m", model, "-t", str(threads), "-r", str(reps), "-ctk", kv_type, "-ctv", kv_type,
            "-fa", "1" if flash_attn else "0", "-p", str(prompt), "-n", str(n_gen), "-d", str(depth), "-o", "json"]
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"peer_llama_bench: {' '.join(argv)} failed:\n{run.stderr[-2000:]}")
    rows = json.loads(run.stdout)
    if len(rows) != 1:
        sys.exit(f"peer_llama_bench: expected one result row from {' '.join(argv)}, got {len(rows)}")
    return rows[0], argv


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-bench", required=True, help="the llama-bench binary")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-p", "--prompt", type=int, default=512)
    p.add_argument("-n", "--n-gen", type=int, default=32)
    p.add_argument("-d", "--depth", default="128,4096")
    p.add_argument("-r", "--reps", type=int, default=3)
    p.add_argument("--kv-type", default="f16", choices=["f16", "q8_0", "q4_0"])
    p.add_argument("--flash-attn", action="store_true")
    p.add_argument("--json", required=True)
    a = p.parse_args()
    common = (a.llama_bench, a.model, a.threads, a.reps, a.kv_type, a.flash_attn)
    pf, argv = llama_bench(*common, a.prompt, 0, 0)
    res = {"engine": "llama.cpp llama-bench", "build": pf.get("build_commit"), "threads": a.threads, "kv": a.kv_type,
           "flash_attn": a.flash_attn, "prefill": {"tokens": a.prompt, "tok_s": pf["avg_ts"]}, "decode": [],
           "argv": [argv]}
    print(f"llama-bench prefill {a.prompt} tokens {pf['avg_ts']:.1f} tok/s")
    for depth in [int(d) for d in a.depth.split(",") if d]:
        row, argv = llama_bench(*common, 0, a.n_gen, depth)
        res["decode"].append({"context": depth, "depth": depth, "tok_s": row["avg_ts"], "tok_s_runs": row.get("samples_ts"),
                              "cpu_tok_s": None})
        res["argv"].append(argv)
        print(f"llama-bench decode {a.n_gen} @ depth {depth} {row['avg_ts']:.1f} tok/s")
    with open(a.json, "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

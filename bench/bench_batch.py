#!/usr/bin/env python3
"""Decode aggregate tok/s against batch width, mpkv beside llama.cpp, in one run (issue 11 item 4).

For each thread count and context depth, one round runs `mpkv bench --synthetic --parallel W1,W2,..`
(every width decodes in one forward call per step, as the serving engine's step) and then
`bench/peer_llamacpp.py batch` at the same widths (llama_batch, one seq_id per sequence, its own KV
stream), back to back; --rounds repeats the pair. Each engine prints the median of -r runs inside a
round; the table gives the median over rounds, the ratio to the same engine's batch 1, and
mpkv / llama.cpp. mpkv fills its contexts with random K/V (speed does not depend on content);
llama.cpp prefills sequence 0 with the same token ids as `mpkv bench` and copies it to the others.

Usage: bench/bench_batch.py --mpkv build/mpkv -m M [-t 1,2] [-d 1024,8192] [--widths 1,2,4,8,16]
       [-n 16] [-r 3] [--rounds 1] [--python .venv-bench/bin/python] [--json out.json] [--no-peer]
Run with OMP_WAIT_POLICY=passive on a shared machine (mpkv's libgomp reads it at start-up).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def ints(s):
    return [int(x) for x in s.split(",")]


def run_json(cmd, path):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    with open(path) as f:
        return json.load(f)


def by_width(result):
    return {d["sequences"]: d["tok_s"] for d in result["decode"]}


def load_avg():
    return os.getloadavg()[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", required=True)
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-t", "--threads", type=ints, default=[1, 2])
    p.add_argument("-d", "--depth", type=ints, default=[1024, 8192])
    p.add_argument("--widths", type=ints, default=[1, 2, 4, 8, 16])
    p.add_argument("-n", "--n-gen", type=int, default=16)
    p.add_argument("-r", "--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--python", default=sys.executable, help="a python with llama_cpp (scripts/install_peer.sh)")
    p.add_argument("--no-peer", action="store_true", help="mpkv only")
    p.add_argument("--json")
    a = p.parse_args()
    widths = ",".join(map(str, a.widths))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in a.threads:
            for depth in a.depth:
                mp, ll, loads = [], [], []
                for _ in range(a.rounds):
                    loads.append(load_avg())
                    mp.append(by_width(run_json(
                        [a.mpkv, "bench", "-m", a.model, "--synthetic", "-d", str(depth), "-n", str(a.n_gen), "-r",
                         str(a.reps), "-p", "16", "-t", str(t), "--parallel", widths, "--json", f"{tmp}/m.json"],
                        f"{tmp}/m.json")))
                    if not a.no_peer:
                        ll.append(by_width(run_json(
                            [a.python, os.path.join(HERE, "peer_llamacpp.py"), "batch", "-m", a.model, "-t", str(t),
                             "-d", str(depth), "-n", str(a.n_gen), "-r", str(a.reps), "--widths", widths,
                             "--json", f"{tmp}/l.json"], f"{tmp}/l.json")))
                    loads.append(load_avg())
                for w in a.widths:
                    r = {"threads": t, "depth": depth, "width": w,
                         "mpkv_tok_s": statistics.median(x[w] for x in mp),
                         "mpkv_rounds": [x[w] for x in mp], "load_avg": loads}
                    if ll:
                        r["llamacpp_tok_s"] = statistics.median(x[w] for x in ll)
                        r["llamacpp_rounds"] = [x[w] for x in ll]
                    rows.append(r)
    first = {(r["threads"], r["depth"]): r for r in rows if r["width"] == a.widths[0]}
    print(f"decode aggregate tok/s, {a.n_gen} steps, median of {a.reps} runs x {a.rounds} rounds "
          f"(x b{a.widths[0]}: against the same engine at width {a.widths[0]})")
    print()
    print("| threads | context | width | mpkv tok/s | x b1 | llama.cpp tok/s | x b1 | mpkv / llama.cpp | load avg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = first[(r["threads"], r["depth"])]
        r["mpkv_vs_b1"] = r["mpkv_tok_s"] / b["mpkv_tok_s"]
        peer = "| - | - | -"
        if "llamacpp_tok_s" in r:
            r["llamacpp_vs_b1"] = r["llamacpp_tok_s"] / b["llamacpp_tok_s"]
            r["mpkv_vs_llamacpp"] = r["mpkv_tok_s"] / r["llamacpp_tok_s"]
            peer = f"| {r['llamacpp_tok_s']:.1f} | {r['llamacpp_vs_b1']:.2f} | {r['mpkv_vs_llamacpp']:.2f}"
        print(f"| {r['threads']} | {r['depth']} | {r['width']} | {r['mpkv_tok_s']:.1f} | {r['mpkv_vs_b1']:.2f} {peer} | "
              f"{min(r['load_avg']):.1f}-{max(r['load_avg']):.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Decode aggregate tok/s against batch width, mpkv beside llama.cpp, in one run (the figures of
docs/results/speed.md section 6).

For each thread count and context depth, one round runs `mpkv bench --synthetic --parallel W1,W2,..`
(every width decodes in one forward call per step, as the serving engine's step) and then
`bench/peer_llamacpp.py batch` at the same widths (llama_batch, one seq_id per sequence, its own KV
stream), back to back; --rounds repeats the pair. Each engine prints the median of -r runs inside a
round; the table gives the median over rounds, the ratio to the same engine's batch 1, and
mpkv / llama.cpp, both per wall second and per CPU-second of the process (at 1 thread on a shared
machine the CPU-second figure is the one that does not depend on the neighbours' load). mpkv fills its contexts with random K/V (speed does not depend on content);
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
    """{width: (tok/s, tok per CPU-second)}"""
    return {d["sequences"]: (d["tok_s"], d["cpu_tok_s"]) for d in result["decode"]}


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
                    r = {"threads": t, "depth": depth, "width": w, "load_avg": loads}
                    for name, res in (("mpkv", mp), ("llamacpp", ll)):
                        if res:
                            r[name + "_tok_s"] = statistics.median(x[w][0] for x in res)
                            r[name + "_cpu_tok_s"] = statistics.median(x[w][1] for x in res)
                            r[name + "_rounds"] = [x[w] for x in res]
                    rows.append(r)
    first = {(r["threads"], r["depth"]): r for r in rows if r["width"] == a.widths[0]}
    print(f"decode aggregate tok/s, {a.n_gen} steps, median of {a.reps} runs x {a.rounds} rounds; wall: tokens per "
          f"second, cpu: tokens per CPU-second (x b1: against the same engine at width {a.widths[0]})")
    print()
    print("| threads | context | width | mpkv wall | x b1 | mpkv cpu | x b1 | llama.cpp wall | x b1 | llama.cpp cpu | x b1 "
          "| mpkv / llama.cpp wall | cpu | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = first[(r["threads"], r["depth"])]
        cells = []
        for name in ("mpkv", "llamacpp"):
            for unit in ("tok_s", "cpu_tok_s"):
                k = f"{name}_{unit}"
                if k in r:
                    r[k + "_vs_b1"] = r[k] / b[k]
                    cells += [f"{r[k]:.1f}", f"{r[k + '_vs_b1']:.2f}"]
                else:
                    cells += ["-", "-"]
        for unit in ("tok_s", "cpu_tok_s"):
            if f"llamacpp_{unit}" in r:
                r[f"mpkv_vs_llamacpp_{unit}"] = r[f"mpkv_{unit}"] / r[f"llamacpp_{unit}"]
                cells.append(f"{r[f'mpkv_vs_llamacpp_{unit}']:.2f}")
            else:
                cells.append("-")
        print(f"| {r['threads']} | {r['depth']} | {r['width']} | " + " | ".join(cells) +
              f" | {min(r['load_avg']):.1f}-{max(r['load_avg']):.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Batched decode side by side with llama.cpp's `llama-batched-bench` (docs/results/speed.md, "Batched
decode against llama-batched-bench"): aggregate decode tok/s of W sequences at once, each holding a
context of D tokens, on the same GGUF, thread count and KV type, one engine after the other per depth.

mpkv:  `mpkv bench -d D -n N --parallel W1,W2,.. -r R` (median of R runs; --synthetic fills the
       contexts with random K/V instead of prefilling them: the decode work is the same).
llama: `llama-batched-bench -npp D -ntg N -npl W1,W2,.. -c W_max*(D+N) -fa on -ctk/-ctv KV`, one run
       (it prefills every sequence's D tokens itself; its S_TG is pl * tg / t_tg).
       With --peer-shared-prompt, -pps: one prompt prefilled and its KV copied into each sequence's own stream.
KV types: f16 for both, or q4_0 in llama.cpp against mpkv's uniform 4-bit (`--kv q4`).
Prints a Markdown table (and writes it with --md): per depth and width both figures, their ratio, and
each engine's width-W figure over its own width-1 figure.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MPKV_KV = {"f16": ["--kv-method", "f16"], "q4": ["--kv-method", "uniform", "--kv-bits", "4"]}
LLAMA_KV = {"f16": "f16", "q4": "q4_0"}


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"batched_vs_llamacpp: {' '.join(argv)} failed:\n{(r.stdout + r.stderr)[-2000:]}")
    return r.stdout


def mpkv_decode(a, depth, widths):
    """{width: (median aggregate decode tok/s, its roofline)} from one `mpkv bench` run (the roofline:
    mpkv bench's bytes read and int8 multiply-adds of a step against the machine's probes)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mpkv.json")
        run([a.mpkv, "bench", "-m", a.model, "-t", str(a.threads), "-p", "16", "-d", str(depth), "-n", str(a.n_gen),
             "-r", str(a.reps), "--parallel", ",".join(map(str, widths)), "--json", path]
            + (["--synthetic"] if a.synthetic else []) + MPKV_KV[a.kv])
        rows = json.load(open(path))["decode"]
    return {d["sequences"]: (statistics.median(d["tok_s_runs"]), d["roofline"]) for d in rows if d["depth"] == depth}


def llama_decode(a, depth, widths):
    """{width: S_TG} from one `llama-batched-bench` run (jsonl output)."""
    ctx = max(widths) * (depth + a.n_gen)
    out = run([a.llama_batched_bench, "-m", a.model, "-t", str(a.threads), "-c", str(ctx), "-b", "2048", "-ub", "512",
               "-fa", "on", "-ctk", LLAMA_KV[a.kv], "-ctv", LLAMA_KV[a.kv], "-npp", str(depth), "-ntg", str(a.n_gen),
               "-npl", ",".join(map(str, widths)), "--output-format", "jsonl"] + (["-pps"] if a.peer_shared_prompt else []))
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return {r["pl"]: r["speed_tg"] for r in rows}


def widths_of(text):
    return [int(w) for w in text.split(",") if w]


def table(a, results):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    lines = [f"{os.path.basename(a.model)}, {a.threads} threads, KV {a.kv} (llama.cpp {LLAMA_KV[a.kv]}, -fa on), "
             f"decode {a.n_gen} tokens per sequence, CPU: {cpu}; mpkv medians of {a.reps} runs"
             + (", contexts filled with random K/V (--synthetic)" if a.synthetic else "")
             + ("; llama.cpp's contexts copied from one prefilled prompt (-pps)" if a.peer_shared_prompt else "") + ".", "",
             "| depth | sequences | mpkv tok/s | llama.cpp tok/s | mpkv / llama.cpp | mpkv W / 1 | llama.cpp W / 1 "
             "| mpkv % read probe | mpkv % int8 peak | binds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for depth, (m_roof, l) in results.items():
        m = {w: v[0] for w, v in m_roof.items()}
        for w in sorted(set(m) | set(l)):
            mv, lv = m.get(w), l.get(w)
            ratio = f"{mv / lv:.2f}x" if mv and lv else "-"
            ms = f"{mv / m[1]:.2f}x" if mv and 1 in m else "-"
            ls = f"{lv / l[1]:.2f}x" if lv and 1 in l else "-"
            f = m_roof[w][1] if w in m_roof else None
            roof = (f" {100 * f['read_probe_fraction']:.0f}% | {100 * f['int8_peak_fraction']:.0f}% | {f['binds']} |"
                    if f else " - | - | - |")
            lines.append((f"| {depth} | {w} | {mv or 0:.1f} | {lv or 0:.1f} | {ratio} | {ms} | {ls} |"
                          .replace("| 0.0 |", "| - |")) + roof)
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.2f} (1 min)."]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", default="build/mpkv")
    p.add_argument("--llama-batched-bench", required=True)
    p.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-n", "--n-gen", type=int, default=32)
    p.add_argument("-r", "--reps", type=int, default=3)
    p.add_argument("--depths", default="128,8192")
    p.add_argument("--widths", default="1,4,16,32", help="mpkv's widths at every depth")
    p.add_argument("--peer-widths", default="128:1,4,16,32;8192:1,4",
                   help="llama.cpp's widths per depth (it prefills every context: wide and deep is slow)")
    p.add_argument("--kv", default="f16", choices=sorted(MPKV_KV))
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--peer-shared-prompt", action="store_true",
                   help="llama.cpp prefills one prompt and copies its KV into every sequence (-pps; with its default "
                        "per-sequence KV streams each sequence still decodes over its own D cells): wide and deep "
                        "runs without W x D tokens of prefill")
    p.add_argument("--md", help="also write the table here")
    a = p.parse_args()
    peer = {int(d): widths_of(w) for d, w in (x.split(":") for x in a.peer_widths.split(";") if x)}
    results = {}
    for depth in (int(d) for d in a.depths.split(",")):
        m = mpkv_decode(a, depth, widths_of(a.widths))
        l = llama_decode(a, depth, peer[depth]) if peer.get(depth) else {}
        results[depth] = (m, l)
        print(f"depth {depth}: mpkv { {w: v[0] for w, v in m.items()} }, llama.cpp {l}", file=sys.stderr, flush=True)
    text = table(a, results)
    print(text)
    if a.md:
        open(a.md, "w").write(text + "\n")


if __name__ == "__main__":
    main()

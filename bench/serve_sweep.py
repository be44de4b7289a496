#!/usr/bin/env python3
"""The serving benchmark sweep: every configuration under one KV byte budget, one server at a time.

For each configuration it starts the server on loopback, runs bench/serve_bench.py against it at
every concurrency level, and stops it; then bench/serve_report.py turns the results into tables
and the effective-bits plot. Configurations:
  f16, kivi-2, progressive-2      mpkv serve with --kv-method f16 / kivi --kv-bits 2 / progressive --kv-bits 2
  plan:FILE                       mpkv serve with --kv-plan FILE (label: the file's name, e.g. combined-2.5)
  llama-server-f16|q8_0|q4_0      llama.cpp's llama-server (--llama-server BIN), continuous batching, -fa on,
                                  -np slots of prompt + max_tokens + 64 positions each, as many as the
                                  budget holds at that KV type (-c = slots x slot context)
  llamacpp-q8_0, llamacpp-q4_0    llama_cpp.server with that KV type (and flash attention), its
  (llamacpp-f16)                  context sized so its KV cache takes the same bytes as the budget

The budget (unless --budget-mib): 4 x the bytes mpkv's f16 cache reserves for one sequence of
prompt + max_tokens + 64 tokens (asked of `mpkv bench --parallel 0`, as scripts/bench_budget.sh
does; the 64 tokens absorb prompts a little over --prompt-tokens).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_servers  # noqa: E402

MPKV_KV_ARGS = {
    "f16": ["--kv-method", "f16"],
    "kivi-2": ["--kv-method", "kivi", "--kv-bits", "2"],
    "progressive-2": ["--kv-method", "progressive", "--kv-bits", "2"],
}


def f16_budget_mib(mpkv, model, tokens, threads):
    """4 x mpkv's f16 bound for one sequence of `tokens` positions (MiB)."""
    return round(4 * f16_sequence_mib(mpkv, model, tokens, threads) + 0.05, 1)


def f16_sequence_mib(mpkv, model, tokens, threads):
    """The bytes mpkv serve's f16 cache reserves for one sequence of `tokens` positions (MiB, as printed):
    its pages and the prefix-cache block records it may publish (the server's admission bound)."""
    out = subprocess.run([mpkv, "bench", "-m", model, "-t", str(threads), "--synthetic", "-d", str(tokens - 2),
                          "-n", "2", "-r", "1", "-p", "16", "--parallel", "0", "--kv-budget-mib", "200",
                          "--kv-method", "f16"], capture_output=True, text=True, check=True)
    m = re.search(r"; ([0-9.]+) MiB with prefix-cache records\)", out.stdout + out.stderr)
    if not m:
        sys.exit(f"serve_sweep: cannot read the per-sequence bound from mpkv bench:\n{out.stdout}{out.stderr}")
    return float(m.group(1))


def config_server(name, a, budget_mib, log_path):
    """(Server, label, facts about the configuration) for one configuration name."""
    if name in MPKV_KV_ARGS or name.startswith("plan:"):
        if name.startswith("plan:"):
            path = name[5:]
            kv, label = ["--kv-plan", path], os.path.splitext(os.path.basename(path))[0].replace("_", "-")
        else:
            kv, label = MPKV_KV_ARGS[name], name
        kv = kv + ["--kv-budget-mib", str(budget_mib)]
        # The startup probe of the read bandwidth and int8 peak: the roofline columns divide by it
        # (docs/serving.md "Roofline counters").
        srv = serve_servers.mpkv_server(a.mpkv, a.model, kv, a.threads, a.ctx, a.max_seqs, a.max_queue, log_path,
                                        extra=["--probe-machine-limits", *a.serve_arg])
        return srv, f"mpkv {label}", {"engine": "mpkv", "server_argv": srv.argv}
    if name.startswith("llama-server-"):
        kv_type = name[len("llama-server-"):]
        if kv_type not in serve_servers.LLAMA_KV_TYPES:
            sys.exit(f"serve_sweep: unknown llama.cpp KV type {kv_type}")
        if not a.llama_server:
            sys.exit("serve_sweep: llama-server configurations need --llama-server BIN (scripts/build_llama_server.sh)")
        slot_ctx = a.prompt_tokens + a.max_tokens + 64
        srv, facts = serve_servers.llama_server(a.llama_server, a.model, a.mpkv, kv_type, budget_mib * 2**20, slot_ctx,
                                                a.threads, log_path)
        return srv, f"llama-server {kv_type}", dict(facts, engine="llama-server", server_argv=srv.argv)
    if name.startswith("llamacpp-"):
        kv_type = name[len("llamacpp-"):]
        if kv_type not in serve_servers.LLAMA_KV_TYPES:
            sys.exit(f"serve_sweep: unknown llama.cpp KV type {kv_type}")
        srv, n_ctx, per_token = serve_servers.llamacpp_server(a.model, kv_type, budget_mib * 2**20, a.threads, log_path)
        return srv, f"llama.cpp {kv_type}", {"engine": "llama_cpp.server", "n_ctx": n_ctx,
                                             "kv_bytes_per_token": per_token, "server_argv": srv.argv}
    sys.exit(f"serve_sweep: unknown configuration {name}")


RESULT_ORDER = ["f16", "kivi-2", "progressive-2", "", "llama-server-f16", "llama-server-q8_0", "llama-server-q4_0",
                "llamacpp-f16", "llamacpp-q8_0", "llamacpp-q4_0"]


def result_rank(path):
    """Table order of a result file: mpkv's caches from f16 down, plans, then the peer's."""
    slug = os.path.basename(path)[len("result_"):-len(".json")]
    return (RESULT_ORDER.index(slug) if slug in RESULT_ORDER else RESULT_ORDER.index(""), slug)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", default="build/mpkv")
    p.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--text", default="../shared/data/wikitext-2/test.txt")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=2048, help="mpkv serve -c (tokens per request)")
    p.add_argument("--max-seqs", type=int, default=64)
    p.add_argument("--max-queue", type=int, default=256)
    p.add_argument("--serve-arg", action="append", default=[], help="extra argument for mpkv serve (repeatable)")
    p.add_argument("--configs", default="f16,kivi-2,progressive-2,plan:docs/results/plans_kivi/combined_2.5.json,"
                                        "llamacpp-q8_0,llamacpp-q4_0")
    p.add_argument("--budget-mib", type=float, default=0, help="KV budget (0: 4 f16 sequences of the workload)")
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--levels", default="1,4,16,64")
    p.add_argument("--requests", type=int, default=0)
    p.add_argument("--level-seconds", type=float, default=0)
    p.add_argument("--llama-server", help="llama-server binary (scripts/build_llama_server.sh) for llama-server-* configs")
    p.add_argument("--bench-arg", action="append", default=[],
                   help="extra argument for serve_bench.py (repeatable), e.g. --bench-arg=--endpoint=chat")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--title", default="")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    budget = a.budget_mib or f16_budget_mib(a.mpkv, a.model, a.prompt_tokens + a.max_tokens + 64, a.threads)
    print(f"serve_sweep: KV budget {budget} MiB for every configuration", flush=True)
    for name in [c for c in a.configs.split(",") if c]:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name.replace("plan:", "").split("/")[-1].replace(".json", ""))
        log_path = os.path.join(a.out_dir, f"server_{slug}.log")
        out = os.path.join(a.out_dir, f"result_{slug}.json")
        srv, label, facts = config_server(name, a, budget, log_path)
        facts.update({"kv_budget_mib": budget, "threads": a.threads})
        with srv:
            cmd = [sys.executable, os.path.join(HERE, "serve_bench.py"), "--url", srv.url, "--label", label,
                   "--text", a.text, "--prompt-tokens", str(a.prompt_tokens), "--max-tokens", str(a.max_tokens),
                   "--levels", a.levels, "--requests", str(a.requests), "--level-seconds", str(a.level_seconds),
                   "--extra", json.dumps(facts), "-o", out, *a.bench_arg]
            print(f"serve_sweep: {label}: {' '.join(srv.argv)}", flush=True)
            subprocess.run(cmd, check=True)
    title = a.title or (f"SmolLM2-135M, {a.threads} threads, KV budget {budget} MiB, prompts ~{a.prompt_tokens} "
                        f"tokens, {a.max_tokens} generated")
    # Every result in the directory, so that a sweep of some configurations joins an earlier one of
    # the others.
    everything = sorted(glob.glob(os.path.join(a.out_dir, "result_*.json")), key=result_rank)
    subprocess.run([sys.executable, os.path.join(HERE, "serve_report.py"), *everything,
                    "--md", os.path.join(a.out_dir, "tables.md"), "--png", os.path.join(a.out_dir, "effective_bits.png"),
                    "--title", title], check=True)


if __name__ == "__main__":
    main()

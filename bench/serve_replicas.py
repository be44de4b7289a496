#!/usr/bin/env python3
"""Scale-out: N `mpkv serve` replicas on loopback behind the SGLang Model Gateway (`smg`, PyPI).

Starts N replicas (each with its own KV budget and -t threads), then `smg launch` with the replicas'
URLs, a routing policy (default cache_aware) and /health polling, waits until the router answers,
and replays the serving benchmark (bench/serve_bench.py) through the router while polling every
replica's /metrics (their figures are added up: requests running, KV bytes, preemptions; effective
bits over all of them). Prints how many requests each replica served, from its
vllm:prompt_tokens_total / vllm:generation_tokens_total, so the routing can be seen.

  serve_replicas.py -n 2 -t 1 --budget-mib 64 --kv-arg=--kv-plan --kv-arg=PLAN.json --out-dir out/replicas
"""
import argparse
import json
import os
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_bench  # noqa: E402
import serve_servers  # noqa: E402


def replica_counts(url):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        s = serve_bench.parse_prometheus(r.read().decode())
    return {k: serve_bench.metric(s, k) for k in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                                                    "vllm:num_preemptions_total")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", default="build/mpkv")
    p.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--smg", default="smg", help="the gateway's command (from `pip install smg`)")
    p.add_argument("--policy", default="cache_aware")
    p.add_argument("-n", "--replicas", type=int, default=2)
    p.add_argument("-t", "--threads", type=int, default=1, help="threads per replica")
    p.add_argument("-c", "--ctx", type=int, default=2048)
    p.add_argument("--max-seqs", type=int, default=64)
    p.add_argument("--budget-mib", type=float, required=True, help="KV budget of each replica")
    p.add_argument("--kv-arg", action="append", default=[], help="KV option for mpkv serve (repeatable)")
    p.add_argument("--text", default="../shared/data/wikitext-2/test.txt")
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--levels", default="1,4,16")
    p.add_argument("--requests", type=int, default=0)
    p.add_argument("--level-seconds", type=float, default=0)
    p.add_argument("--out-dir", required=True)
    a = p.parse_args()
    if a.replicas < 1:
        sys.exit("serve_replicas: -n must be at least 1")
    os.makedirs(a.out_dir, exist_ok=True)
    kv = a.kv_arg + ["--kv-budget-mib", str(a.budget_mib)]
    replicas = [serve_servers.mpkv_server(a.mpkv, a.model, kv, a.threads, a.ctx, a.max_seqs, 256,
                                          os.path.join(a.out_dir, f"replica_{i}.log")) for i in range(a.replicas)]
    started = []
    try:
        for r in replicas:
            started.append(r.__enter__())
        urls = [r.url for r in started]
        print(f"serve_replicas: {len(urls)} replicas: {' '.join(urls)}", flush=True)
        router = serve_servers.smg_router(a.smg, urls, a.policy, os.path.join(a.out_dir, "router.log"))
        with router:
            print(f"serve_replicas: router {router.url} ({' '.join(router.argv)})", flush=True)
            out = os.path.join(a.out_dir, "result_replicas.json")
            facts = {"replicas": urls, "router_argv": router.argv, "kv_budget_mib": a.budget_mib * a.replicas,
                     "threads": a.threads * a.replicas, "policy": a.policy}
            cmd = [sys.executable, os.path.join(HERE, "serve_bench.py"), "--url", router.url,
                   "--label", f"{a.replicas} x mpkv behind smg ({a.policy})", "--text", a.text,
                   "--prompt-tokens", str(a.prompt_tokens), "--max-tokens", str(a.max_tokens), "--levels", a.levels,
                   "--requests", str(a.requests), "--level-seconds", str(a.level_seconds),
                   "--extra", json.dumps(facts), "-o", out]
            for u in urls:
                cmd += ["--metrics-url", u]
            subprocess.run(cmd, check=True)
            for i, u in enumerate(urls):
                c = replica_counts(u)
                print(f"serve_replicas: replica {i} ({u}): prompt tokens {c['vllm:prompt_tokens_total']:.0f}, "
                      f"generated {c['vllm:generation_tokens_total']:.0f}, preemptions "
                      f"{c['vllm:num_preemptions_total']:.0f}", flush=True)
    finally:
        for r in reversed(started):
            r.stop()
    subprocess.run([sys.executable, os.path.join(HERE, "serve_report.py"), out,
                    "--md", os.path.join(a.out_dir, "tables.md")], check=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The same engine driven directly: the serving benchmark's requests through `mpkv generate`
(--prompts, one line each, --chat, --ignore-eos, all admitted together under the same KV budget and
sampling), output tok/s from generate's own summary line (its run from the first step: model load
and weight repacking excluded, as a server has them done before its first request); the process's
start-to-exit figure is kept beside it as process_output_tok_s.
Writes a result JSON shaped like bench/serve_bench.py's (one level, output tok/s only), labelled
"direct mpkv CONFIG", so bench/serve_long_report.py puts it beside the served rows and prints
served / direct.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_bench  # noqa: E402  (the question set)
import serve_sweep  # noqa: E402  (the KV arguments of each configuration)


def kv_args(config):
    if config.startswith("plan:"):
        return ["--kv-plan", config[5:]], os.path.splitext(os.path.basename(config[5:]))[0].replace("_", "-")
    return serve_sweep.MPKV_KV_ARGS[config], config


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", default="build/mpkv")
    p.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--config", required=True, help="f16, kivi-2, progressive-2 or plan:FILE")
    p.add_argument("--budget-mib", type=float, required=True)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, required=True)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args()
    kv, label = kv_args(a.config)
    prompts = a.out + ".prompts.txt"
    with open(prompts, "w") as f:
        f.write("\n".join(serve_bench.reasoning_questions(a.requests)) + "\n")
    argv = [a.mpkv, "generate", "-m", a.model, "--prompts", prompts, "--chat",
            "--ignore-eos", "-n", str(a.max_tokens), "-c", str(a.ctx), "-t", str(a.threads),
            "--temp", str(a.temperature), "--top-p", str(a.top_p), "--top-k", "0", "-s", "1",
            *kv, "--kv-budget-mib", str(a.budget_mib)]
    t0 = time.monotonic()
    # Generated text may end inside a UTF-8 sequence: decode leniently (only the summary line is read).
    run = subprocess.run(argv, capture_output=True, encoding="utf-8", errors="replace",
                         env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    wall = time.monotonic() - t0
    if run.returncode != 0:
        sys.exit(f"serve_direct: {' '.join(argv)} failed:\n{run.stderr[-2000:]}")
    tokens = a.requests * a.max_tokens
    # generate's own summary ("output X tok/s over Y s"): the run from its first step, model load and
    # repacking excluded, on the clock docs/cli.md describes; the process wall time is kept beside it.
    m = re.search(r"output ([0-9.]+) tok/s over ([0-9.]+) s", run.stderr)
    if not m:
        sys.exit(f"serve_direct: no summary line in the output of {' '.join(argv)}")
    level = {"concurrency": a.requests, "requests": a.requests, "completed": a.requests, "failed": 0,
             "output_tok_s": float(m.group(1)), "wall_s": float(m.group(2)), "process_wall_s": wall,
             "process_output_tok_s": tokens / wall, "request_rate": "inf"}
    for k in ("ttft", "tpot", "itl", "e2e"):
        level[f"{k}_p50_s"] = level[f"{k}_p99_s"] = None
    result = {"label": f"direct mpkv {label}", "workload": {"max_tokens": a.max_tokens, "requests": a.requests},
              "extra": {"server_argv": argv, "summary": run.stderr.strip().splitlines()[-3:]},
              "levels": [level], "load_avg": os.getloadavg()}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"serve_direct: {result['label']}: {tokens} tokens in {wall:.1f} s = {tokens / wall:.1f} tok/s", flush=True)


if __name__ == "__main__":
    main()

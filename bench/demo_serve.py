#!/usr/bin/env python3
"""The README's serving demo: long generations under one KV budget, the 16-bit cache against a
calibrated plan (and llama.cpp's llama-server at the same KV bytes when its binary is there).

The seeds' case: short reasoning-style chat prompts (bench/serve_bench.py's question set), long
answers (--max-tokens, default 512), N requests at once. For each cache it starts `mpkv serve` on
loopback under the same --kv-budget-mib, sends the N requests at once through the official `openai`
client (AsyncOpenAI, streaming, temperature 0.6, top_p 0.95), polls /metrics while they run, stops
the server and prints one line: requests running at once (most seen in vllm:num_requests_running;
llama-server: its slots, at most the requests), output tok/s (tokens in usage / wall time), peak KV
bytes (mpkv:kv_bytes_used; llama-server: the KV it allocates at start-up) and the lowest effective
bits per K/V element (mpkv:kv_effective_bits; '-' for llama-server, which has no such metric).
Every answer is exactly --max-tokens tokens (`ignore_eos`, an extra body field both servers read).
The budget holds 4 sequences of prompt + max_tokens at 16 bits.
"""
import argparse
import asyncio
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_bench  # noqa: E402  (passages, /metrics parsing and polling)
import serve_servers  # noqa: E402
import serve_sweep  # noqa: E402


async def drive(url, passages, max_tokens):
    import httpx
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=1800)
    async with httpx.AsyncClient(trust_env=False) as http:
        t0 = time.monotonic()
        poller = serve_bench.MetricsPoller(http, [url], 0.25, t0)
        poller.start()

        async def one(i, question):
            stream = await client.chat.completions.create(
                model="mpkv", messages=[{"role": "user", "content": question}],
                max_tokens=max_tokens, temperature=0.6, top_p=0.95, seed=i, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            text, tokens = [], 0
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    text.append(chunk.choices[0].delta.content)
                if chunk.usage:
                    tokens = chunk.usage.completion_tokens
            return "".join(text), tokens

        answers = await asyncio.gather(*(one(i, p) for i, p in enumerate(passages)))
        wall = time.monotonic() - t0
        await poller.stop()
    await client.close()
    return answers, wall, poller.samples


def report(label, answers, wall, samples, peer=None):
    """One result line. mpkv's figures come from its /metrics samples; llama-server (peer: its
    facts from serve_servers.llama_server) has no such metrics: its slots bound how many run at once
    and its KV is allocated whole at start-up, so those are printed and the rest is '-'."""
    def peak(key):
        vals = [s[key] for s in samples if s.get(key) is not None]
        return max(vals) if vals else None

    tokens = sum(t for _, t in answers)
    if peer is not None:
        print(f"{label:<22} {min(peer['n_parallel'], len(answers)):>4d} at once   {tokens / wall:7.1f} output tok/s   "
              f"KV {peer['kv_bytes'] / 2**20:6.1f} MiB allocated ({peer['n_parallel']} slots)   effective bits -   "
              f"preemptions -", flush=True)
        return
    bits = [s["effective_bits"] for s in samples if s.get("effective_bits")]
    used = peak("kv_bytes_used")
    budget = samples[-1].get("kv_budget_bytes") if samples else None
    print(f"{label:<22} {peak('running') or 0:>4.0f} at once   {tokens / wall:7.1f} output tok/s   "
          f"peak KV {(used or 0) / 2**20:6.1f} of {(budget or 0) / 2**20:.1f} MiB   "
          f"effective bits {min(bits) if bits else float('nan'):5.2f} (lowest)   "
          f"preemptions {samples[-1].get('preemptions_total') if samples else '-'}", flush=True)


def servers(a, budget):
    """(label, server, peer facts or None) for each configuration of the demo: mpkv f16, mpkv with the plan, and
    llama-server at f16 / q4_0 KV when --llama-server names a binary."""
    ctx = a.prompt_tokens + a.max_tokens + 64
    for label, kv in (("mpkv f16", ["--kv-method", "f16"]),
                      ("mpkv " + os.path.basename(a.plan), ["--kv-plan", a.plan])):
        log = os.path.join(a.out_dir, f"server_{label.replace(' ', '_')}.log")
        yield label, serve_servers.mpkv_server(a.mpkv, a.model, kv + ["--kv-budget-mib", str(budget)], a.threads,
                                               ctx, a.requests, 4 * a.requests, log), None
    if a.llama_server:
        for kv_type in ("f16", "q4_0"):
            log = os.path.join(a.out_dir, f"server_llama-server_{kv_type}.log")
            srv, facts = serve_servers.llama_server(a.llama_server, a.model, a.mpkv, kv_type, budget * 2**20, ctx,
                                                    a.threads, log)
            yield f"llama-server {kv_type}", srv, facts


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", default="build/mpkv")
    p.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--plan", required=True, help="calibrated plan (mpkv calibrate -o)")
    p.add_argument("--llama-server", help="llama-server binary (scripts/build_llama_server.sh); absent: skipped")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-n", "--requests", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=96, help="positions a prompt takes with its chat template")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--out-dir", default="out/demo_serve")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    questions = serve_bench.reasoning_questions(a.requests)
    budget = serve_sweep.f16_budget_mib(a.mpkv, a.model, a.prompt_tokens + a.max_tokens + 64, a.threads)
    print(f"{a.requests} reasoning chat requests at once, {a.max_tokens} tokens each; "
          f"KV budget {budget} MiB (4 sequences at 16 bits)", flush=True)
    sample = None
    for label, srv, peer in servers(a, budget):
        try:
            with srv:
                answers, wall, samples = asyncio.run(drive(srv.url, questions, a.max_tokens))
        except serve_servers.ServerError as e:
            if label.startswith("mpkv"):
                raise
            # The optional peer failing (a crash at start-up, say) leaves mpkv's rows standing: said
            # here with its log, its row left out, and the demo goes on.
            print(f"{label:<25} failed, row left out: {str(e).splitlines()[0]}", flush=True)
            continue
        report(label, answers, wall, samples, peer)
        if label.startswith("mpkv"):
            sample = answers[0][0]
    print(f"\nfirst answer under the plan: {sample[:300]!r}...")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The README's serving demo: one KV budget, the 16-bit cache against a calibrated plan.

For each cache it starts `mpkv serve` on loopback under the same --kv-budget-mib, sends N chat
requests at once through the official `openai` client (AsyncOpenAI, streaming), polls /metrics
while they run, stops the server and prints one line per cache: requests running at once (most
seen in vllm:num_requests_running), output tok/s (tokens in usage / wall time), peak KV bytes
(mpkv:kv_bytes_used) and the lowest effective bits per K/V element (mpkv:kv_effective_bits).

Each request asks the model to continue a passage of WikiText-2 test (or of this repository's docs
when ../shared is absent) and generates exactly --max-tokens tokens (`ignore_eos`, sent as an
extra body field). The budget holds 4 sequences of prompt + max_tokens at 16 bits.
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

        async def one(i, passage):
            stream = await client.chat.completions.create(
                model="mpkv", messages=[{"role": "user", "content": "Continue this text:\n\n" + passage}],
                max_tokens=max_tokens, temperature=0.7, seed=i, stream=True,
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


def report(label, answers, wall, samples):
    def peak(key):
        vals = [s[key] for s in samples if s.get(key) is not None]
        return max(vals) if vals else None

    bits = [s["effective_bits"] for s in samples if s.get("effective_bits")]
    tokens = sum(t for _, t in answers)
    used = peak("kv_bytes_used")
    budget = samples[-1].get("kv_budget_bytes") if samples else None
    print(f"{label:<22} {peak('running') or 0:>4.0f} at once   {tokens / wall:7.1f} output tok/s   "
          f"peak KV {(used or 0) / 2**20:6.1f} of {(budget or 0) / 2**20:.1f} MiB   "
          f"effective bits {min(bits) if bits else float('nan'):5.2f} (lowest)   "
          f"preemptions {samples[-1].get('preemptions_total') if samples else '-'}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", default="build/mpkv")
    p.add_argument("-m", "--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--plan", required=True, help="calibrated plan (mpkv calibrate -o)")
    p.add_argument("--text", required=True, help="text the prompts are cut from")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-n", "--requests", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=512, help="approximate (4 characters per token)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--out-dir", default="out/demo_serve")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    passages = serve_bench.load_passages(a.text, a.requests, a.prompt_tokens * 4)
    # Chat template and instruction add about 40 tokens to each prompt.
    budget = serve_sweep.f16_budget_mib(a.mpkv, a.model, a.prompt_tokens + 40 + a.max_tokens + 64, a.threads)
    print(f"{a.requests} chat requests at once, prompts ~{a.prompt_tokens} tokens, {a.max_tokens} tokens each; "
          f"KV budget {budget} MiB (4 sequences at 16 bits)", flush=True)
    sample = None
    for label, kv in (("f16", ["--kv-method", "f16"]),
                      (os.path.basename(a.plan), ["--kv-plan", a.plan])):
        log = os.path.join(a.out_dir, f"server_{label}.log")
        with serve_servers.mpkv_server(a.mpkv, a.model, kv + ["--kv-budget-mib", str(budget)], a.threads,
                                       2048, a.requests, 4 * a.requests, log) as srv:
            answers, wall, samples = asyncio.run(drive(srv.url, passages, a.max_tokens))
        report(label, answers, wall, samples)
        sample = answers[0][0]
    print(f"\nfirst answer under the plan: {sample[:300]!r}...")


if __name__ == "__main__":
    main()

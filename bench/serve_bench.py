#!/usr/bin/env python3
"""Serving benchmark client for any OpenAI-compatible server (mpkv serve, llama_cpp.server, a router).

Replays a fixed workload at several concurrency levels and reports what aiperf / guidellm report
(docs/results/serving.md says why neither is used here): time to first token (TTFT), time per output
token (TPOT), inter-token latency (ITL, the gaps between streamed chunks) and end-to-end latency, p50
and p99; requests/s and output tok/s; failed requests; and, from the server's Prometheus /metrics
when it has one, requests running at once, preemptions, KV bytes and effective bits over time.

Workload: request i of a level sends a passage of WikiText-2 test cut to about --prompt-tokens
tokens to /v1/completions (streamed, temperature --temperature, seed i) and asks for --max-tokens
tokens with `ignore_eos: true` and `min_tokens: max_tokens` (vLLM's extra fields; mpkv serve reads
the first, llama_cpp.server the second; a server that honours neither may stop early, and
usage.completion_tokens says how many came; --no-ignore-eos sends neither). Characters per token are
measured once per server with a non-streamed warm-up request (usage.prompt_tokens), so prompts have
the requested length without a tokenizer on the client. The same passages go to every server.

A level runs `--requests` requests (0: as many as its concurrency) through `concurrency` workers,
each starting its next request as soon as its previous one ends (closed loop). With --level-seconds
S a level stops after S seconds: requests still streaming are cancelled (the client disconnects)
and counted as `cut`, not as failures; their first tokens and chunk gaps still count towards TTFT
and ITL, but only completed requests count towards end-to-end latency, TPOT and requests/s; those
cut before their first token are counted apart (their TTFT is longer than the box, so the TTFT
percentiles of a level with such requests are lower bounds).

Each record keeps the prompt tokens and, where the server reports them, the cached prompt tokens
(usage.prompt_tokens_details.cached_tokens, else llama-server's timings.cache_n); --cache-prompt
sends llama-server's cache_prompt field.

Writes one JSON file (levels, per-request records, /metrics samples) for bench/serve_report.py.
"""
import argparse
import asyncio
import json
import os
import random
import re
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_roofline import MACHINE_GAUGES, ROOFLINE_COUNTERS, roofline_counters, roofline_window  # noqa: E402

METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_prometheus(text):
    """{(name, frozenset(labels)): value} for every sample line of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = value
    return out


def metric(samples, name, default=None):
    """The unlabelled sample of `name`, or the sum over its label sets."""
    vals = [v for (n, _), v in samples.items() if n == name]
    return sum(vals) if vals else default


def summarize_metrics(samples):
    """The figures this benchmark follows, from one /metrics scrape (None where absent)."""
    shrinks = {f"{dict(l).get('from')}->{dict(l).get('to')}": v
               for (n, l), v in samples.items() if n == "mpkv:kv_page_shrinks_total"}
    return {
        "running": metric(samples, "vllm:num_requests_running"),
        "waiting": metric(samples, "vllm:num_requests_waiting"),
        "kv_usage": metric(samples, "vllm:kv_cache_usage_perc"),
        "kv_bytes_used": metric(samples, "mpkv:kv_bytes_used"),
        "kv_budget_bytes": metric(samples, "mpkv:kv_budget_bytes"),
        "effective_bits": metric(samples, "mpkv:kv_effective_bits"),
        "preemptions_total": metric(samples, "vllm:num_preemptions_total"),
        "generation_tokens_total": metric(samples, "vllm:generation_tokens_total"),
        "page_shrinks": shrinks,
        **roofline_counters(samples, metric),
    }


def combine_metrics(parts):
    """One summary for several servers (replicas behind a router): counts and bytes add up; effective
    bits are total stored bits over total elements (a byte-weighted harmonic mean)."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for key in ("running", "waiting", "kv_bytes_used", "kv_budget_bytes", "preemptions_total",
                "generation_tokens_total", *ROOFLINE_COUNTERS):
        vals = [p[key] for p in parts if p.get(key) is not None]
        out[key] = sum(vals) if vals else None
    # Replicas share one machine: their probes are not a limit of the sum (the report says n/a).
    out.update({k: None for k in MACHINE_GAUGES})
    usage = [p["kv_usage"] for p in parts if p.get("kv_usage") is not None]
    out["kv_usage"] = max(usage) if usage else None
    elems = sum(p["kv_bytes_used"] * 8 / p["effective_bits"] for p in parts
                if p.get("kv_bytes_used") and p.get("effective_bits"))
    out["effective_bits"] = (sum(p["kv_bytes_used"] for p in parts if p.get("effective_bits")) * 8 / elems
                             if elems else None)
    for key in ("page_shrinks", "decode_kv_bytes_by_bits"):
        summed = {}
        for p in parts:
            for k, v in (p.get(key) or {}).items():
                summed[k] = summed.get(k, 0) + v
        out[key] = summed
    return out


class MetricsPoller:
    """Scrapes /metrics of one or more servers every `interval` seconds while running; remembers
    whether they have it (a server without /metrics, such as llama_cpp.server, stops the polling)."""

    def __init__(self, client, urls, interval, t0):
        self.client, self.urls, self.interval, self.t0 = client, urls, interval, t0
        self.samples = []
        self.available = None
        self._task = None

    async def _one(self, url):
        try:
            r = await self.client.get(url + "/metrics", timeout=5.0)
        except httpx.HTTPError:
            return None
        return r

    async def scrape(self):
        replies = await asyncio.gather(*(self._one(u) for u in self.urls))
        if any(r is not None and r.status_code != 200 for r in replies) and self.available is None:
            self.available = False
        if self.available is False or any(r is None or r.status_code != 200 for r in replies):
            return None
        self.available = True
        s = combine_metrics([summarize_metrics(parse_prometheus(r.text)) for r in replies])
        s["t"] = time.monotonic() - self.t0
        self.samples.append(s)
        return s

    async def _loop(self):
        while self.available is not False:
            await self.scrape()
            await asyncio.sleep(self.interval)

    def start(self):
        self._task = asyncio.create_task(self._loop())

    async def stop(self):
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.scrape()


def load_passages(path, n, chars):
    """n passages of `chars` characters from the text, starting at line starts spread over it."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"\n\s*\n", "\n", text)
    if len(text) < chars * 2:
        sys.exit(f"serve_bench: {path} is too short for prompts of {chars} characters")
    stride = max(1, (len(text) - chars) // max(1, n))
    out = []
    for i in range(n):
        start = text.find("\n", i * stride) + 1
        start = min(start, len(text) - chars)
        out.append(text[start:start + chars])
    return out


QUESTION_TEMPLATES = [
    "A train leaves a station at {a}:00 and travels at {b} km/h. A second train leaves the same station at "
    "{c}:00 on the same track at {d} km/h. When and where does the second train catch up? Think step by step.",
    "A shop sells pens at {a} cents and notebooks at {b} cents. Maria spends exactly {e} cents on {c} items. "
    "How many of each did she buy? Reason carefully and check every case.",
    "Prove or disprove: the sum of {a} consecutive integers is always divisible by {a}. Explain your "
    "reasoning in detail, then give a worked example starting at {b}.",
    "A tank holds {e} litres. Pipe A fills it in {a} hours, pipe B in {b} hours and drain C empties it in "
    "{c} hours. With all three open, how long until the tank is full? Show every step.",
    "Plan a {a}-day trip for {c} people with a budget of {e} euros, where lodging costs {b} euros per night "
    "per room and each room holds two people. Reason through the costs and write the plan.",
    "Explain how binary search works, then trace it by hand on a sorted list of {a} numbers when looking for "
    "the value {b}. Discuss the number of comparisons in the worst case.",
    "Three friends split a bill of {e} euros. The first pays {a} percent more than the second, the third pays "
    "{b} euros less than the first. How much does each pay? Think it through step by step.",
    "Write a careful argument about whether {a} * {b} + {c} is a prime number, checking small divisors one "
    "at a time, and explain the method you used.",
]


def reasoning_questions(n):
    """n short reasoning-style chat prompts (the long-generation workload: short prompts, long answers),
    the same n for every server: templates filled with numbers from a fixed seed."""
    rng = random.Random(1234)
    out = []
    for i in range(n):
        t = QUESTION_TEMPLATES[i % len(QUESTION_TEMPLATES)]
        v = {k: rng.randint(2, 19) for k in "abcd"}
        v["e"] = rng.randint(100, 999)
        out.append(t.format(**v))
    return out


async def warm_up(client, a, headers):
    """Sends one short non-streamed request; returns (model id, characters per prompt token)."""
    model = a.model
    if not model:
        r = await client.get(a.url + "/v1/models", headers=headers, timeout=30.0)
        r.raise_for_status()
        model = r.json()["data"][0]["id"]
    # From the end of the text: no benchmark passage starts with it, so a server that reuses a cached
    # prompt prefix (llama.cpp keeps its last sequence) gains nothing on the first request.
    text = open(a.text, encoding="utf-8").read()
    # Short for the question workload, whose servers may have small per-request contexts.
    sample = text[text.find("\n", max(0, len(text) - 5000)) + 1:][:4000 if a.prompts == "wikitext" else 200]
    body = {"model": model, "prompt": sample, "max_tokens": 1, "temperature": 0.0}
    r = await client.post(a.url + "/v1/completions", json=body, headers=headers, timeout=600.0)
    r.raise_for_status()
    prompt_tokens = r.json()["usage"]["prompt_tokens"]
    return model, len(sample) / prompt_tokens


def token_hex(e):
    """A logprob entry's token bytes as hex (its 'bytes' field, else its text in UTF-8)."""
    return bytes(e.get("bytes") or e["token"].encode("utf-8")).hex()


def keep_logprobs(choice, rec):
    """Appends a chat chunk's per-token logprobs to rec['logprobs'] as [hex, logprob, [[hex, logprob], ...]]
    (bench/served_quality.cpp reads them back to token ids by their bytes)."""
    for e in ((choice.get("logprobs") or {}).get("content") or []):
        rec.setdefault("logprobs", []).append(
            [token_hex(e), e["logprob"], [[token_hex(t), t["logprob"]] for t in e.get("top_logprobs") or []]])


def cached_tokens(msg):
    """Prompt tokens served from a cached prefix, from a final chunk: OpenAI's
    usage.prompt_tokens_details.cached_tokens (mpkv serve, vLLM, llama-server), else llama-server's
    timings.cache_n; None when the server reports neither."""
    details = (msg.get("usage") or {}).get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        return details["cached_tokens"]
    return (msg.get("timings") or {}).get("cache_n")


async def one_request(client, a, headers, model, prompt, seed, rec):
    """Streams one completion into rec (times relative to rec['start'], monotonic seconds)."""
    body = {"model": model, "max_tokens": a.max_tokens, "temperature": a.temperature,
            "seed": seed, "stream": True, "stream_options": {"include_usage": True}}
    if a.endpoint == "chat":
        # A list is a whole conversation (bench/multi_turn.py); a string is one user message.
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if a.top_p is not None:
        body["top_p"] = a.top_p
    if a.top_k is not None:
        body["top_k"] = a.top_k
    if a.top_logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = a.top_logprobs
    if a.keep_text:
        rec["prompt"] = prompt
    if a.cache_prompt:
        body["cache_prompt"] = True            # llama-server's per-request prompt reuse (its default is on)
    if a.ignore_eos:
        body["ignore_eos"] = True              # vLLM's field (mpkv serve)
        body["min_tokens"] = a.max_tokens      # vLLM's and llama-cpp-python's (holds end-of-generation back)
    t0 = rec["start"]
    chunks = rec["chunk_times"]
    path = "/v1/chat/completions" if a.endpoint == "chat" else "/v1/completions"
    async with client.stream("POST", a.url + path, json=body, headers=headers,
                             timeout=httpx.Timeout(a.request_timeout, connect=10.0)) as r:
        if r.status_code != 200:
            rec["status"] = r.status_code
            rec["error"] = (await r.aread()).decode("utf-8", "replace")[:300]
            return
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                rec["done"] = True
                break
            msg = json.loads(data)
            if msg.get("error"):
                rec["error"] = json.dumps(msg["error"])[:300]
                return
            if msg.get("usage"):
                rec["completion_tokens"] = msg["usage"].get("completion_tokens")
                rec["prompt_tokens"] = msg["usage"].get("prompt_tokens")
                rec["cached_tokens"] = cached_tokens(msg)
            for ch in msg.get("choices") or []:
                piece = ch.get("text") or (ch.get("delta") or {}).get("content")
                if piece:
                    chunks.append(time.monotonic() - t0)
                    if a.keep_text:
                        rec["text"] = rec.get("text", "") + piece
                if a.top_logprobs is not None:
                    keep_logprobs(ch, rec)
                if ch.get("finish_reason"):
                    rec["finish_reason"] = ch["finish_reason"]
    rec["status"] = 200


async def run_request(client, a, headers, model, prompt, rec, t_level):
    """Fills rec (already in the level's list, so a cancelled request is still reported as cut)."""
    rec.update({"start": time.monotonic(), "chunk_times": [], "status": None, "done": False})
    seed = rec["seed"]
    try:
        await one_request(client, a, headers, model, prompt, seed, rec)
    except asyncio.CancelledError:
        rec["cut"] = True
        raise
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        rec["end"] = time.monotonic()
        rec["t_start"] = rec["start"] - t_level
        rec["latency"] = rec["end"] - rec["start"]
        rec["ok"] = bool(rec["status"] == 200 and (rec["done"] or rec.get("finish_reason")) and not rec.get("error")
                         and not rec.get("cut"))
        if rec["ok"] and rec.get("completion_tokens") is None:
            # No usage chunk (llama_cpp.server streams none): max_tokens when it stopped for length,
            # else one token per chunk (a lower bound).
            rec["completion_tokens"] = (a.max_tokens if rec.get("finish_reason") == "length"
                                        else len(rec["chunk_times"]))
            rec["tokens_estimated"] = True


async def run_poisson(client, a, headers, model, passages, conc, first_seed, n, records, t_level):
    """Open loop (vllm bench serve --request-rate): request i is sent at the i-th arrival of a Poisson
    process of a.request_rate per second (seeded, so every server sees the same schedule), at most
    `conc` in flight; all n run to completion."""
    rng = random.Random(first_seed)
    gate = asyncio.Semaphore(conc)

    async def one(i, at):
        await asyncio.sleep(max(0.0, t_level + at - time.monotonic()))
        async with gate:
            rec = {"seed": first_seed + i}
            records.append(rec)
            await run_request(client, a, headers, model, passages[(first_seed + i) % len(passages)], rec, t_level)

    arrivals, t = [], 0.0
    for i in range(n):
        arrivals.append(t)
        t += rng.expovariate(a.request_rate)
    await asyncio.gather(*(one(i, at) for i, at in enumerate(arrivals)))


async def run_level(client, a, headers, model, passages, conc, first_seed):
    n = a.requests or conc
    unsent = list(range(n))  # request indices of this level not yet sent (a shared work queue)
    records = []
    t_level = time.monotonic()
    if a.request_rate != float("inf"):
        await run_poisson(client, a, headers, model, passages, conc, first_seed, n, records, t_level)
        return records, time.monotonic() - t_level
    deadline = t_level + a.level_seconds if a.level_seconds > 0 else None

    async def worker():
        while unsent and (deadline is None or time.monotonic() < deadline):
            seed = first_seed + unsent.pop(0)
            rec = {"seed": seed}
            records.append(rec)
            await run_request(client, a, headers, model, passages[seed % len(passages)], rec, t_level)

    workers = [asyncio.create_task(worker()) for _ in range(conc)]
    done, pending = await asyncio.wait(workers, timeout=a.level_seconds if deadline else None)
    for w in pending:
        w.cancel()
    for w in pending:
        try:
            await w
        except asyncio.CancelledError:
            pass
    return records, time.monotonic() - t_level


def pct(values, q):
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(q / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def max_overlap(intervals):
    """The largest number of [begin, end) intervals that overlap at one instant."""
    events = sorted([(b, 1) for b, e in intervals] + [(e, -1) for b, e in intervals], key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def level_summary(records, wall, conc, metrics_window, slo_tpot_ms=250.0):
    ok = [r for r in records if r["ok"]]
    cut = [r for r in records if r.get("cut")]
    failed = [r for r in records if not r["ok"] and not r.get("cut")]
    ttft = [r["chunk_times"][0] for r in records if r["chunk_times"]]
    itl = [b - a for r in records for a, b in zip(r["chunk_times"], r["chunk_times"][1:])]
    tpot_owners = [r for r in ok if r["chunk_times"] and (r["completion_tokens"] or 0) > 1]
    tpot = [(r["latency"] - r["chunk_times"][0]) / (r["completion_tokens"] - 1) for r in tpot_owners]
    e2e = [r["latency"] for r in ok]
    out_tokens = sum(r["completion_tokens"] or 0 for r in ok) + sum(len(r["chunk_times"]) for r in cut)
    streaming = max_overlap([(r["start"] + r["chunk_times"][0], r["start"] + r["chunk_times"][-1])
                             for r in records if r["chunk_times"]])
    s = {
        "concurrency": conc, "requests": len(records), "completed": len(ok), "cut": len(cut),
        "cut_before_first_token": sum(1 for r in cut if not r["chunk_times"]),
        "failed": len(failed), "failure_examples": [r.get("error") or f"status {r['status']}" for r in failed[:3]],
        "wall_s": wall, "requests_per_s": len(ok) / wall if wall > 0 else None,
        "output_tok_s": out_tokens / wall if wall > 0 else None, "output_tokens": out_tokens,
        "prompt_tokens_mean": (sum(r.get("prompt_tokens") or 0 for r in ok) / len(ok)) if ok else None,
        "completion_tokens_mean": (sum(r["completion_tokens"] for r in ok) / len(ok)) if ok else None,
        "streaming_at_once_max": streaming,
        # vllm bench serve's goodput: completed requests per second that met the SLO (TPOT here).
        "slo_tpot_ms": slo_tpot_ms,
        "goodput_requests_per_s": (sum(1 for r, t in zip(tpot_owners, tpot) if t * 1e3 <= slo_tpot_ms) / wall
                                   if wall > 0 else None),
    }
    for name, vals in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e)):
        s[f"{name}_p50_s"] = pct(vals, 50)
        s[f"{name}_p99_s"] = pct(vals, 99)
    if metrics_window:
        first, last = metrics_window[0], metrics_window[-1]

        def delta(key):
            if first.get(key) is None or last.get(key) is None:
                return None
            return last[key] - first[key]

        def peak(key):
            vals = [m[key] for m in metrics_window if m.get(key) is not None]
            return max(vals) if vals else None

        bits = [m["effective_bits"] for m in metrics_window if m.get("effective_bits")]
        s.update({
            "running_max": peak("running"), "waiting_max": peak("waiting"),
            "kv_bytes_used_max": peak("kv_bytes_used"), "kv_budget_bytes": last.get("kv_budget_bytes"),
            "kv_usage_max": peak("kv_usage"), "preemptions": delta("preemptions_total"),
            "effective_bits_min": min(bits) if bits else None,
            "page_shrinks": {k: v - first.get("page_shrinks", {}).get(k, 0)
                             for k, v in (last.get("page_shrinks") or {}).items()},
            "roofline": roofline_window(first, last),
        })
    return s


def fmt(v, scale=1.0, nd=2):
    return "-" if v is None else f"{v * scale:.{nd}f}"


async def main_async(a):
    headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    limits = httpx.Limits(max_connections=max(a.levels) + 8, max_keepalive_connections=max(a.levels) + 8)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        model, cpt = await warm_up(client, a, headers)
        chars = int(a.prompt_tokens * cpt)
        total = sum(a.requests or c for c in a.levels)
        passages = load_passages(a.text, total, chars) if a.prompts == "wikitext" else reasoning_questions(total)
        t0 = time.monotonic()
        poller = MetricsPoller(client, a.metrics_url or [a.url], a.metrics_interval, t0)
        poller.start()
        levels, all_records, seed = [], [], 0
        for conc in a.levels:
            m_from = len(poller.samples)
            t_begin = time.monotonic() - t0
            records, wall = await run_level(client, a, headers, model, passages, conc, seed)
            await poller.scrape()
            seed += a.requests or conc
            s = level_summary(records, wall, conc, poller.samples[max(0, m_from - 1):], a.slo_tpot_ms)
            s["request_rate"] = a.request_rate if a.request_rate != float("inf") else "inf"
            s["t_begin_s"], s["t_end_s"] = t_begin, time.monotonic() - t0
            levels.append(s)
            for r in records:
                r["concurrency"] = conc
            all_records.extend(records)
            print(f"[{a.label}] c={conc:3d}: {s['completed']}/{s['requests']} ok, {s['failed']} failed, {s['cut']} cut; "
                  f"TTFT p50 {fmt(s['ttft_p50_s'])} s p99 {fmt(s['ttft_p99_s'])} s; "
                  f"TPOT p50 {fmt(s['tpot_p50_s'], 1e3, 1)} ms; ITL p99 {fmt(s['itl_p99_s'], 1e3, 1)} ms; "
                  f"{fmt(s['output_tok_s'], 1, 1)} out tok/s; goodput {fmt(s['goodput_requests_per_s'], 1, 3)} req/s; "
                  f"streaming at once {s['streaming_at_once_max']}"
                  + (f"; running max {s.get('running_max')}, preemptions {s.get('preemptions')}, "
                     f"bits min {fmt(s.get('effective_bits_min'))}" if poller.available else ""),
                  flush=True)
            if a.pause_s:
                await asyncio.sleep(a.pause_s)
        await poller.stop()
    return {
        "label": a.label, "url": a.url, "model": model, "command": " ".join(sys.argv),
        "workload": {"prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens, "ignore_eos": a.ignore_eos,
                     "endpoint": a.endpoint, "prompts": a.prompts, "top_p": a.top_p, "top_k": a.top_k,
                     "request_rate": a.request_rate if a.request_rate != float("inf") else "inf",
                     "temperature": a.temperature, "chars_per_token": cpt, "prompt_chars": chars,
                     "requests_per_level": a.requests, "level_seconds": a.level_seconds, "text": a.text},
        "extra": json.loads(a.extra) if a.extra else {},
        "metrics_available": bool(poller.available), "levels": levels, "metrics": poller.samples,
        "records": all_records, "load_avg": os.getloadavg(),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--label", required=True, help="name of this configuration in the report")
    p.add_argument("--text", required=True, help="prompt source text (WikiText-2 test)")
    p.add_argument("--model", help="model id (default: the first of /v1/models)")
    p.add_argument("--api-key")
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    p.add_argument("--top-p", type=float, help="sent when given (default: the server's)")
    p.add_argument("--top-k", type=int, help="sent when given (default: the server's)")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--prompts", choices=["wikitext", "questions"], default="wikitext",
                   help="wikitext: passages of --text cut to --prompt-tokens; questions: short reasoning prompts")
    p.add_argument("--request-rate", type=float, default=float("inf"),
                   help="Poisson arrivals per second (inf: all at once, closed loop of --levels workers)")
    p.add_argument("--slo-tpot-ms", type=float, default=250.0, help="TPOT bound of the goodput figure")
    p.add_argument("--cache-prompt", action="store_true",
                   help="send cache_prompt: true (llama-server's prompt reuse; other servers ignore it)")
    p.add_argument("--keep-text", action="store_true", help="store each prompt and answer text in the records")
    p.add_argument("--top-logprobs", type=int, choices=range(0, 21), metavar="0..20",
                   help="chat only: ask for each token's logprob and this many alternatives and store them "
                        "in the records (bench/served_quality.cpp)")
    p.add_argument("--levels", default="1,4,16,64", help="comma-separated concurrency levels")
    p.add_argument("--requests", type=int, default=0, help="requests per level (0: its concurrency)")
    p.add_argument("--level-seconds", type=float, default=0, help="time box per level (0: none)")
    p.add_argument("--request-timeout", type=float, default=1800)
    p.add_argument("--metrics-interval", type=float, default=0.5)
    p.add_argument("--metrics-url", action="append", default=[],
                   help="server whose /metrics to poll (repeatable; default --url): the replicas behind a router")
    p.add_argument("--pause-s", type=float, default=1.0, help="idle time between levels")
    p.add_argument("--extra", help="JSON object stored with the results (server options, budget)")
    p.add_argument("-o", "--out", required=True, help="JSON file to write")
    a = p.parse_args()
    a.levels = [int(x) for x in a.levels.split(",") if x.strip()]
    if not a.levels or min(a.levels) < 1:
        sys.exit("serve_bench: --levels needs positive integers")
    if a.top_logprobs is not None and a.endpoint != "chat":
        sys.exit("serve_bench: --top-logprobs needs --endpoint chat (completions logprobs carry no token bytes)")
    result = asyncio.run(main_async(a))
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()

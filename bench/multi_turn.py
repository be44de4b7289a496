#!/usr/bin/env python3
"""Multi-turn chat benchmark for prefix caching (docs/results/prefix_cache.md).

Workload (the same text for every server, fixed by --seed):
  - one shared system prompt: a fixed instruction plus the start of WikiText-2 test, about
    --system-tokens tokens in all (--distinct-system: prefixed with the conversation's number, so
    that conversations share no prefix);
  - C conversations (--conversations) of T turns (--turns); the user message of turn t is a passage
    of WikiText-2 test (its own place in the text) followed by a question about it, its length drawn
    uniformly in [--user-tokens-min, --user-tokens-max] tokens;
  - every turn is a chat request (/v1/chat/completions, streamed) whose messages are the system
    prompt, the whole history of the conversation (each earlier user message and the answer the
    server streamed back for it, verbatim) and the new user message; --max-tokens answer tokens at
    --temperature 0 with ignore_eos / min_tokens, so answers have a fixed length on every server.
Token lengths need no client tokenizer: characters per token are measured once with a warm-up
request (bench/serve_bench.py's warm_up, from the end of the text that no turn uses).

Schedule (open loop with per-conversation order):
  - the C x T turns are laid out in T rounds; round r holds turn r of every conversation, in a
    seeded random order (--order shuffled) or in conversation order (--order round-robin); slot k
    of the concatenated rounds is due at k / --rate seconds after the start;
  - a turn is sent at its due time, or, when the previous turn of its conversation has not been
    answered by then, as soon as that answer is complete (a user cannot reply earlier); the delay
    is recorded as `late`. So a conversation's turns come about C / rate seconds apart (between 1
    and 2C - 1 slots with shuffled rounds), with the other conversations' turns in between: the
    cache must hold many conversations to hit. With round-robin the gap is always C slots, and a
    pure LRU cache smaller than the C histories misses every history (cyclic access).
  - every turn runs to completion (fixed request count, as `vllm bench serve`); a failed turn ends
    its conversation (its later turns are recorded as skipped).

Per turn: time to first token (from the send), end-to-end latency, prompt tokens, cached prompt
tokens (usage.prompt_tokens_details.cached_tokens, or llama-server's timings.cache_n), completion
tokens, due / send / end times. Summary: token hit rate (sum cached / sum prompt over completed
turns, and per turn index), TTFT p50 / p99, output tok/s over the run (completion tokens / time
from the first due slot to the last answer), lateness, and the /metrics counters that name the
prefix cache (scraped before and after the run; deltas of counters, end values of gauges).

With --top-logprobs N --logprobs-out FILE, every answer token's logprob and N alternatives are asked
for, and FILE gets the completed turns in bench/serve_bench.py's result format (records with seed,
"prompt" = the turn's messages as a list, "text", "logprobs" = [token hex, logprob, [[hex, logprob],
...]], plus turn and cached_tokens) for bench/served_quality.cpp, which teacher-forces each answer
after its whole message history through the f16 cache (it must encode a message list through the
chat template).

Server: --url of a running one, or one started here on loopback for the run (--mpkv BIN with
--serve-arg ..., or --llama-server BIN with --budget-mib: one unified KV cache of the same bytes,
bench/serve_servers.py). Writes one JSON file (-o).
"""
import argparse
import asyncio
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_bench  # noqa: E402
import serve_servers  # noqa: E402

DEFAULT_TEXT = os.path.join(os.path.dirname(HERE), "..", "shared", "data", "wikitext-2", "test.txt")

SYSTEM_HEAD = ("You are a careful reading assistant. The reference text below is shared by every conversation. "
               "Answer each question about the passage the user gives, briefly and factually, and relate it "
               "to the reference text where you can.\n\nReference text:\n")

QUESTIONS = [
    "Question: who or what is this passage mainly about?",
    "Question: summarize the passage above in two sentences.",
    "Question: which dates or numbers appear above, and what do they refer to?",
    "Question: which people are named above, and what did each of them do?",
    "Question: what happened first and what happened last in the passage?",
    "Question: how does this passage relate to the reference text and to the earlier passages?",
    "Question: list three facts from the passage above.",
    "Question: which places are mentioned above?",
]

# /metrics names kept in the result: the prefix cache's (mpkv: vllm:prefix_cache_*, mpkv:prefix_cache_*;
# llama-server: llamacpp:prompt_tokens_cached_total ...) and the shrink / preemption counters.
METRIC_KEYS = ("prefix_cache", "cached", "page_shrinks", "preemptions", "kv_bytes_used", "kv_budget_bytes")


def turn_slots(n_conv, n_turns, order, seed):
    """[(conversation, turn)] in sending order: T rounds, round r = turn r of every conversation."""
    rng = random.Random(seed)
    slots = []
    for t in range(n_turns):
        convs = list(range(n_conv))
        if order == "shuffled":
            rng.shuffle(convs)
        slots.extend((c, t) for c in convs)
    return slots


def cut(text, chars):
    """The first `chars` characters of text, shortened to the last word boundary."""
    head = text[:max(1, chars)]
    return head.rsplit(" ", 1)[0] if " " in head[1:] else head


def build_workload(text_path, n_conv, n_turns, chars_per_token, system_tokens, user_min, user_max, seed):
    """(system prompt, users[c][t]): the system prompt and every user message of every conversation."""
    rng = random.Random(seed)
    sys_chars = int(system_tokens * chars_per_token) - len(SYSTEM_HEAD)
    user_chars = int(user_max * chars_per_token)
    if sys_chars < 1 or user_min < 1 or user_max < user_min:
        sys.exit("multi_turn: need --system-tokens above the instruction and 1 <= --user-tokens-min <= max")
    passages = serve_bench.load_passages(text_path, n_conv * n_turns + 1, max(sys_chars, user_chars))
    system = SYSTEM_HEAD + cut(passages[0], sys_chars)
    users = []
    for c in range(n_conv):
        row = []
        for t in range(n_turns):
            question = QUESTIONS[rng.randrange(len(QUESTIONS))]
            chars = int(rng.randint(user_min, user_max) * chars_per_token) - len(question) - 2
            row.append(cut(passages[1 + c * n_turns + t], chars) + "\n\n" + question)
        users.append(row)
    return system, users


def system_prompt(system, conversation, distinct):
    """The shared system prompt, or (distinct) one that differs from the others in its first words,
    so that no two conversations share a cached page."""
    return f"Conversation {conversation}. {system}" if distinct else system


async def run_turns(client, a, headers, model, system, users, slots, t0, logprob_records):
    """Sends every slot's turn on schedule (module docstring); returns the records in slot order and
    appends the completed turns' messages, answers and logprobs to logprob_records (--logprobs-out)."""
    history = [[] for _ in users]
    broken = [False] * len(users)
    answered = {ct: asyncio.Event() for ct in slots}
    records = [None] * len(slots)

    async def one(k, c, t):
        due = k / a.rate
        await asyncio.sleep(max(0.0, t0 + due - time.monotonic()))
        if t > 0:
            await answered[(c, t - 1)].wait()
        rec = {"seed": c * a.turns + t, "conversation": c, "turn": t, "slot": k, "due": due}
        records[k] = rec
        user = {"role": "user", "content": users[c][t]}
        if broken[c]:
            rec.update({"ok": False, "skipped": True, "chunk_times": []})
        else:
            messages = [{"role": "system", "content": system_prompt(system, c, a.distinct_system)}, *history[c], user]
            await serve_bench.run_request(client, a, headers, model, messages, rec, t0)
            rec["late"] = rec["t_start"] - due
            if rec["ok"]:
                history[c] += [user, {"role": "assistant", "content": rec.get("text", "")}]
            else:
                broken[c] = True
            if a.logprobs_out and rec["ok"]:
                logprob_records.append({k: rec[k] for k in ("seed", "conversation", "turn", "ok", "prompt", "text",
                                                              "logprobs", "prompt_tokens", "cached_tokens")
                                        if k in rec})
            for k in () if a.keep_text_records else ("prompt", "text", "logprobs"):
                rec.pop(k, None)
        answered[(c, t)].set()

    await asyncio.gather(*(one(k, c, t) for k, (c, t) in enumerate(slots)))
    return records


def summarize(records, n_turns, rate):
    """The run's figures from its records (times in seconds from the first due slot)."""
    ok = [r for r in records if r["ok"]]
    reported = [r for r in ok if r.get("cached_tokens") is not None and r.get("prompt_tokens")]
    prompt = sum(r["prompt_tokens"] for r in reported)
    cached = sum(r["cached_tokens"] for r in reported)
    ttft = [r["chunk_times"][0] for r in ok if r["chunk_times"]]
    out_tokens = sum(r.get("completion_tokens") or 0 for r in ok)
    wall = max((r["t_start"] + r["latency"] for r in ok), default=0.0)
    per_turn = []
    for t in range(n_turns):
        rs = [r for r in reported if r["turn"] == t]
        p = sum(r["prompt_tokens"] for r in rs)
        per_turn.append({"turn": t, "completed": len(rs), "prompt_tokens": p,
                         "hit_rate": sum(r["cached_tokens"] for r in rs) / p if p else None,
                         "ttft_p50_s": serve_bench.pct([r["chunk_times"][0] for r in rs if r["chunk_times"]], 50)})
    late = [r["late"] for r in ok]
    return {
        "turns": len(records), "completed": len(ok), "skipped": sum(1 for r in records if r.get("skipped")),
        "failed": sum(1 for r in records if not r["ok"] and not r.get("skipped")),
        "failure_examples": [r.get("error") or f"status {r.get('status')}" for r in records
                             if not r["ok"] and not r.get("skipped")][:3],
        "cached_tokens_reported": len(reported),
        "prompt_tokens": prompt, "cached_tokens": cached, "hit_rate": cached / prompt if prompt else None,
        "ttft_p50_s": serve_bench.pct(ttft, 50), "ttft_p99_s": serve_bench.pct(ttft, 99),
        "e2e_p50_s": serve_bench.pct([r["latency"] for r in ok], 50),
        "late_p50_s": serve_bench.pct(late, 50), "late_max_s": max(late, default=None),
        "output_tokens": out_tokens, "wall_s": wall, "output_tok_s": out_tokens / wall if wall > 0 else None,
        "schedule_s": (len(records) - 1) / rate if records else 0.0,
        "per_turn": per_turn,
    }


def prefix_metrics(text):
    """{name{labels}: value} of the /metrics samples this benchmark keeps (METRIC_KEYS)."""
    out = {}
    for (name, labels), v in serve_bench.parse_prometheus(text).items():
        if any(k in name for k in METRIC_KEYS):
            lab = ",".join(f'{k}="{v2}"' for k, v2 in sorted(labels))
            out[name + ("{" + lab + "}" if lab else "")] = v
    return out


def metrics_delta(start, end):
    """End values, and end - start for the counters (names ending in _total, or vLLM's prefix counters)."""
    delta = {k: v - start.get(k, 0.0) for k, v in end.items()
             if k.split("{")[0].endswith(("_total", "prefix_cache_queries", "prefix_cache_hits"))}
    return {"end": end, "delta": delta}


async def scrape(client, url, headers):
    import httpx
    try:
        r = await client.get(url + "/metrics", headers=headers, timeout=10.0)
    except httpx.HTTPError:
        return None
    return prefix_metrics(r.text) if r.status_code == 200 else None


async def main_async(a):
    import httpx
    headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    limits = httpx.Limits(max_connections=a.conversations + 8, max_keepalive_connections=a.conversations + 8)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        model, cpt = await serve_bench.warm_up(client, a, headers)
        system, users = build_workload(a.text, a.conversations, a.turns, cpt, a.system_tokens,
                                       a.user_tokens_min, a.user_tokens_max, a.seed)
        slots = turn_slots(a.conversations, a.turns, a.order, a.seed)
        m_start = await scrape(client, a.url, headers)
        load_before = os.getloadavg()
        logprob_records = []
        records = await run_turns(client, a, headers, model, system, users, slots, time.monotonic(), logprob_records)
        m_end = await scrape(client, a.url, headers)
    s = summarize(records, a.turns, a.rate)
    print(f"[{a.label}] {s['completed']}/{s['turns']} turns ok, {s['failed']} failed, {s['skipped']} skipped; "
          f"hit rate {serve_bench.fmt(s['hit_rate'], 1, 3)}; TTFT p50 {serve_bench.fmt(s['ttft_p50_s'])} s "
          f"p99 {serve_bench.fmt(s['ttft_p99_s'])} s; {serve_bench.fmt(s['output_tok_s'], 1, 1)} out tok/s; "
          f"wall {s['wall_s']:.1f} s (schedule {s['schedule_s']:.1f} s); late p50 {serve_bench.fmt(s['late_p50_s'])} s",
          flush=True)
    workload = {"endpoint": "chat", "conversations": a.conversations, "turns": a.turns, "rate": a.rate,
                "order": a.order, "seed": a.seed, "system_tokens": a.system_tokens, "distinct_system": a.distinct_system,
                "user_tokens": [a.user_tokens_min, a.user_tokens_max], "max_tokens": a.max_tokens,
                "temperature": a.temperature, "ignore_eos": a.ignore_eos, "cache_prompt": a.cache_prompt,
                "chars_per_token": cpt, "system_chars": len(system), "text": a.text}
    head = {"label": a.label, "url": a.url, "model": model, "command": " ".join(sys.argv), "workload": workload}
    if a.logprobs_out:
        write_json(a.logprobs_out, dict(head, records=logprob_records))
    return {
        **head, "extra": a.extra_facts, "summary": s,
        "metrics": metrics_delta(m_start, m_end) if m_start is not None and m_end is not None else None,
        "records": records, "load_avg_before": load_before, "load_avg": os.getloadavg(),
    }


def start_server(a):
    """A server for --mpkv / --llama-server (None with --url), and facts about it for the result."""
    log = os.path.splitext(a.out)[0] + ".server.log"
    if a.mpkv:
        kv = ["--kv-budget-mib", str(a.budget_mib)] if a.budget_mib else []
        srv = serve_servers.mpkv_server(a.mpkv, a.model_file, kv, a.threads, a.ctx, a.max_seqs, 4 * a.conversations,
                                        log, extra=a.serve_arg)
        return srv, {"engine": "mpkv", "kv_budget_mib": a.budget_mib, "server_argv": srv.argv}
    if a.llama_server:
        if not a.budget_mib:
            sys.exit("multi_turn: --llama-server needs --budget-mib (its unified KV cache takes those bytes)")
        srv, facts = serve_servers.llama_server_unified(a.llama_server, a.model_file, a.mpkv_info or "build/mpkv",
                                                        a.budget_mib * 2**20, a.conversations, a.threads, log,
                                                        extra=a.serve_arg)
        return srv, dict(facts, engine="llama-server", kv_budget_mib=a.budget_mib, server_argv=srv.argv)
    return None, {}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("server (one of)")
    g.add_argument("--url", help="base URL of a running server, e.g. http://127.0.0.1:8080")
    g.add_argument("--mpkv", help="start `BIN serve` on loopback for the run (with --serve-arg, --budget-mib)")
    g.add_argument("--llama-server", help="start this llama-server on loopback, one unified f16 KV cache of --budget-mib")
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra argument for the started server (repeatable; use --serve-arg=--flag for dashes)")
    p.add_argument("--budget-mib", type=float, default=0, help="KV budget of the started server (0: none)")
    p.add_argument("-m", "--model-file", default="models/SmolLM2-135M-Instruct.Q4_1.gguf", help="GGUF for a started server")
    p.add_argument("--mpkv-info", help="mpkv binary read for the KV shape when starting llama-server (default build/mpkv)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=4096, help="mpkv serve -c (tokens per request)")
    p.add_argument("--max-seqs", type=int, default=16, help="mpkv serve --max-seqs")
    p.add_argument("--label", required=True, help="name of this configuration in the report")
    p.add_argument("--text", default=DEFAULT_TEXT, help="WikiText-2 test (default ../shared/data/wikitext-2/test.txt)")
    p.add_argument("--model", help="model id sent in requests (default: the first of /v1/models)")
    p.add_argument("--api-key")
    p.add_argument("--conversations", type=int, default=32)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--rate", type=float, default=1.0, help="turns per second (slot k is due at k / rate)")
    p.add_argument("--order", choices=["shuffled", "round-robin"], default="shuffled")
    p.add_argument("--seed", type=int, default=0, help="fixes the text, the question and length draws and the order")
    p.add_argument("--system-tokens", type=int, default=550)
    p.add_argument("--distinct-system", action="store_true",
                   help="start each conversation's system prompt with its number: no prefix is shared across "
                        "conversations (with --turns 1: nothing to reuse, the prefix cache's overhead alone)")
    p.add_argument("--user-tokens-min", type=int, default=60)
    p.add_argument("--user-tokens-max", type=int, default=150)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    p.add_argument("--cache-prompt", action="store_true", help="send cache_prompt: true (llama-server)")
    p.add_argument("--top-logprobs", type=int, choices=range(0, 21), metavar="0..20",
                   help="ask for every answer token's logprob and this many alternatives (needs --logprobs-out)")
    p.add_argument("--logprobs-out", help="write the completed turns' messages, answers and logprobs here, in "
                                          "bench/serve_bench.py's result format (bench/served_quality.cpp)")
    p.add_argument("--keep-text", action="store_true", help="keep every turn's messages and answer in the -o records")
    p.add_argument("--request-timeout", type=float, default=1800)
    p.add_argument("--extra", help="JSON object stored with the results (configuration facts)")
    p.add_argument("-o", "--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    if sum(x is not None for x in (a.url, a.mpkv, a.llama_server)) != 1:
        p.error("give exactly one of --url, --mpkv, --llama-server")
    if a.conversations < 1 or a.turns < 1 or a.rate <= 0 or a.max_tokens < 1:
        p.error("--conversations, --turns, --max-tokens and --rate must be positive")
    # What bench/serve_bench.py's request functions read.
    a.endpoint, a.prompts, a.top_p, a.top_k = "chat", "wikitext", None, None
    if (a.top_logprobs is None) != (a.logprobs_out is None):
        p.error("--top-logprobs and --logprobs-out go together")
    a.keep_text_records = a.keep_text
    a.keep_text = True  # the answer text is the next turn's history
    a.extra_facts = json.loads(a.extra) if a.extra else {}
    return a


def main():
    a = parse_args()
    srv, facts = start_server(a)
    a.extra_facts.update(facts, threads=a.threads)
    if srv is None:
        result = asyncio.run(main_async(a))
    else:
        with srv:
            a.url = srv.url
            result = asyncio.run(main_async(a))
    write_json(a.out, result)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

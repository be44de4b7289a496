#!/usr/bin/env python3
"""End-to-end test of `mpkv serve` with the official `openai` client (docs/serving.md).

Starts the server on an ephemeral loopback port with the real SmolLM2 model and a KV budget, then:
  1. chat and completions, streaming and not, usage present; /v1/models; /metrics names; the
     decode-step roofline counters against the GGUF counted by hand (gguf_shapes.py);
     every OpenAI / vLLM field the server reads (penalties, logit_bias, stop_token_ids, echo,
     token-id prompts, prompt lists, priority, usage.prompt_tokens_details), /tokenize and
     /detokenize in both servers' shapes, and a 400 naming each field when out of range;
  2. 32 concurrent clients, good requests mixed with bad ones (bad JSON, wrong types, a prompt
     longer than the context, missing auth): every good request gives the same text as when run
     alone at temperature 0, every bad one its 4xx, the KV budget is never exceeded (polled from
     /metrics during the run) and mpkv:kv_bytes_used returns to what the prefix cache keeps;
  3. a client that disconnects mid-stream has its request aborted (bytes back to the cached ones);
  4. SIGTERM with a request in flight: it is aborted after --shutdown-timeout, the server exits 0;
  5. a server started with SIGINT ignored (as a shell starts `mpkv serve &`) still stops on SIGINT.
Every wait is bounded. Exit code 77 (CTest: skipped) when the model is absent.
Usage: test_serve_openai.py --mpkv BUILD/mpkv --source SOURCE_DIR
"""
import argparse
import concurrent.futures as futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_shapes import read_gguf  # noqa: E402
from serve_e2e import (API_KEY, SKIP, check, expect_400, fail, http_request, metric, metric_labelled, metrics,  # noqa: E402
                       mpkv_serve, need_model, need_packages, run_against)

N_CTX = 512
BUDGET_MIB = 8  # f16 pages of 64 tokens are ~1.4 MiB per sequence for SmolLM2-135M: ~5 run at once
MAX_TOKENS = 16
LONG_TOKENS = 200  # a request that runs for seconds; ~220 tokens of f16 KV (~5 MiB) fit the budget alone


def wait_kv_empty(base, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        t = metrics(base)
        # Only pages no request holds stay: the prefix cache's (mpkv:prefix_cache_bytes).
        if metric(t, "mpkv:kv_bytes_used") == metric(t, "mpkv:prefix_cache_bytes") and \
                metric(t, "vllm:num_requests_running") == 0:
            return
        time.sleep(0.1)
    t = metrics(base)
    fail("%s: KV bytes did not return to the cached ones within %ds (kv_bytes_used %s, prefix_cache_bytes %s, running %s)" % (
        what, timeout, metric(t, "mpkv:kv_bytes_used"), metric(t, "mpkv:prefix_cache_bytes"),
        metric(t, "vllm:num_requests_running")))


TOPICS = ["the sea", "a cat", "winter", "bread", "a train", "the moon", "music", "a garden", "rain", "chess",
          "a library", "coffee", "mountains", "a bicycle", "the sun", "a river", "friendship", "a clock",
          "autumn", "a lighthouse", "snow", "a violin", "the desert", "a forest"]


def good_request(i):
    """(kind, stream, payload) of the i-th good request; kinds alternate chat / completion."""
    kind = "chat" if i % 2 == 0 else "completion"
    stream = i % 3 == 0
    if kind == "chat":
        return kind, stream, {"messages": [{"role": "user", "content": "Write one sentence about %s." % TOPICS[i]}]}
    return kind, stream, {"prompt": "A short story about %s:" % TOPICS[i]}


def run_good(client, i):
    """The generated text of good request i (temperature 0)."""
    kind, stream, payload = good_request(i)
    common = dict(model="smol", max_tokens=MAX_TOKENS, temperature=0)
    if kind == "chat":
        if not stream:
            r = client.chat.completions.create(messages=payload["messages"], **common)
            check(r.usage is not None and r.usage.completion_tokens >= 1, "chat usage missing")
            return r.choices[0].message.content
        text = ""
        for chunk in client.chat.completions.create(messages=payload["messages"], stream=True, **common):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text
    if not stream:
        r = client.completions.create(prompt=payload["prompt"], **common)
        check(r.usage is not None and r.usage.prompt_tokens >= 1, "completion usage missing")
        return r.choices[0].text
    text = ""
    for chunk in client.completions.create(prompt=payload["prompt"], stream=True, **common):
        if chunk.choices:
            text += chunk.choices[0].text
    return text


def run_bad(openai, client, base, j):
    """Sends bad request j; returns (expected status, got status)."""
    kind = j % 4
    if kind == 0:  # malformed JSON
        return 400, http_request(base, "POST", "/v1/chat/completions", '{"messages": [')[0]
    if kind == 1:  # missing auth
        return 401, http_request(base, "POST", "/v1/completions", '{"prompt": "hi", "max_tokens": 2}', auth=False)[0]
    try:
        if kind == 2:  # wrong type, through the official client
            client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}],
                                           temperature="hot", max_tokens=2)
        else:  # prompt longer than the context
            client.completions.create(model="smol", prompt="word " * (4 * N_CTX), max_tokens=2)
    except openai.BadRequestError as e:
        return 400, e.status_code
    except openai.APIStatusError as e:
        return 400, e.status_code
    return 400, 200


def test_basics(openai, client, srv):
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Say hi."}],
                                       max_tokens=8, temperature=0)
    check(r.object == "chat.completion" and r.choices[0].finish_reason in ("stop", "length"), "chat shape: %r" % r)
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "chat usage sums")
    r = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=8, temperature=0,
                                  logprobs=2)
    check(r.object == "text_completion" and r.usage.completion_tokens >= 1, "completion shape: %r" % r)
    check(r.choices[0].logprobs is not None and len(r.choices[0].logprobs.tokens) >= 1, "completion logprobs")
    chunks = list(client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Count to 3."}],
                                                 max_tokens=8, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    check(chunks and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1, "stream usage chunk")
    check(any(c.choices and c.choices[0].finish_reason for c in chunks), "stream finish_reason")
    models = client.models.list()
    check([m.id for m in models.data] == ["smol"], "models: %r" % models)
    t = metrics(srv.base)
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count",
                 "mpkv:kv_bytes_used", "mpkv:kv_budget_bytes", "mpkv:kv_effective_bits"]:
        check(metric(t, name) is not None, "metric %s missing" % name)
    check(metric(t, "mpkv:kv_budget_bytes") == BUDGET_MIB * 1048576, "budget in /metrics")
    check(metric(t, "vllm:e2e_request_latency_seconds_count") >= 3, "e2e histogram counts requests")
    print("basics: ok", flush=True)


def roofline_shape(model):
    """What one decode step of the served model reads and multiplies, counted from the GGUF file by hand
    (gguf_shapes.py): the multiplied matrices' bytes and rows x columns (every layer's seven and the
    output head, the embedding table when tied), the fp16 K and V bytes of one position, and the
    attention multiply-adds per visible row."""
    meta, tensors = read_gguf(model)
    arch = meta["general.architecture"]
    n_layer, n_head = meta[arch + ".block_count"], meta[arch + ".attention.head_count"]
    n_head_kv = meta.get(arch + ".attention.head_count_kv", n_head)
    head_dim = meta.get(arch + ".attention.key_length", meta[arch + ".embedding_length"] // n_head)
    names = ["blk.%d.%s.weight" % (l, m) for l in range(n_layer)
             for m in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
    names.append("output.weight" if "output.weight" in tensors else "token_embd.weight")
    return {"weight_bytes": sum(tensors[n][2] for n in names),
            "weight_macs": sum(tensors[n][0][0] * tensors[n][0][1] for n in names),
            "kv_position_bytes": n_layer * n_head_kv * head_dim * 2 * 2,
            "attention_macs_per_row": n_layer * n_head * head_dim * 2}


def test_roofline_counters(client, srv, model):
    """One request alone, 12 tokens: 11 decode steps (the first token comes from the prompt's step), each
    reading the weights once and the f16 pages of every position so far, against the GGUF counted by
    hand; the startup probe's gauges are set (--probe-machine-limits)."""
    before = metrics(srv.base)
    r = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=12, temperature=0,
                                  extra_body={"ignore_eos": True})
    check(r.usage.completion_tokens == 12, "12 tokens, got %d" % r.usage.completion_tokens)
    # The engine publishes its figures at the end of a step, after the callbacks that answered the
    # client: the last step may show a moment later.
    end = time.time() + 10
    after = metrics(srv.base)
    while metric(after, "vllm:num_requests_running") != 0 and time.time() < end:
        time.sleep(0.05)
        after = metrics(srv.base)

    def delta(name, labels=""):
        pick = (lambda t: metric_labelled(t, name, labels)) if labels else (lambda t: metric(t, name))
        return (pick(after) or 0) - (pick(before) or 0)

    shape, p = roofline_shape(model), r.usage.prompt_tokens
    positions = range(p, p + 11)  # the decode steps' tokens; a query at position q reads q + 1 positions
    check(delta("mpkv:decode_steps_total") == 11, "decode steps %s, expected 11" % delta("mpkv:decode_steps_total"))
    check(delta("mpkv:decode_step_tokens_total") == 11, "decode tokens %s" % delta("mpkv:decode_step_tokens_total"))
    check(delta("mpkv:decode_step_seconds_total") > 0, "decode step seconds did not grow")
    check(delta("mpkv:decode_step_weight_bytes_total") == 11 * shape["weight_bytes"],
          "weight bytes %s, expected 11 x %d" % (delta("mpkv:decode_step_weight_bytes_total"), shape["weight_bytes"]))
    kv = sum(q + 1 for q in positions) * shape["kv_position_bytes"]
    check(delta("mpkv:decode_step_kv_bytes_total", 'bits="16"') == kv,
          "16-bit page bytes %s, expected %d" % (delta("mpkv:decode_step_kv_bytes_total", 'bits="16"'), kv))
    check(delta("mpkv:decode_step_kv_fp16_row_bytes_total") == 0, "f16 pages keep no fp16 window rows")
    macs = 11 * shape["weight_macs"] + sum(q + 1 for q in positions) * shape["attention_macs_per_row"]
    check(delta("mpkv:decode_step_macs_total") == macs,
          "multiply-adds %s, expected %d" % (delta("mpkv:decode_step_macs_total"), macs))
    for name in ("mpkv:machine_read_bytes_per_second", "mpkv:machine_int8_macs_per_second"):
        check((metric(after, name) or 0) > 0, "%s not probed" % name)
    check(metric(after, "mpkv:machine_probe_threads") == 2, "probe threads")
    print("roofline counters: ok", flush=True)


def test_vllm_fields(openai, client, srv):
    """vLLM's extra fields through the official client's extra_body; unknown fields are counted."""
    msgs = [{"role": "user", "content": "Say hi."}]
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=12, temperature=0,
                                       extra_body={"ignore_eos": True, "min_tokens": 12, "repetition_penalty": 1.1,
                                                   "min_p": 0.05})
    check(r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length",
          "ignore_eos + min_tokens: all 12 tokens, got %d (%s)" % (r.usage.completion_tokens, r.choices[0].finish_reason))
    for extra, field in [({"min_tokens": 13}, "min_tokens"), ({"repetition_penalty": 0}, "repetition_penalty"),
                         ({"min_p": 1.5}, "min_p"), ({"ignore_eos": "yes"}, "ignore_eos")]:
        try:
            client.chat.completions.create(model="smol", messages=msgs, max_tokens=12, extra_body=extra)
            fail("%r was accepted" % extra)
        except openai.BadRequestError as e:
            check(e.status_code == 400 and field in str(e), "%r: %s" % (extra, e))
    r = client.completions.create(model="smol", prompt="Hello", max_tokens=2, extra_body={"e2e_unknown_field": 1})
    check(r.usage.completion_tokens >= 1, "a request with an unknown field is served")
    t = metrics(srv.base)
    m = re.search(r'^mpkv:request_unknown_fields_total\{field="e2e_unknown_field",[^}]*\} (\S+)$', t, re.M)
    check(m is not None and float(m.group(1)) >= 1, "unknown field not counted in /metrics")
    print("vllm fields: ok", flush=True)


def post_json(base, path, body):
    status, data = http_request(base, "POST", path, json.dumps(body))
    check(status == 200, "%s %r: HTTP %d %r" % (path, body, status, data))
    return json.loads(data)


def test_prefix_cache(client, srv):
    """A repeated long system prompt is read from the prefix cache: usage.prompt_tokens_details.cached_tokens,
    the same greedy answer (f16 pages: bit for bit), and the prefix-cache metrics."""
    system = " ".join("Rule %d: answer briefly and politely, and never invent facts." % i for i in range(12))
    def ask(question):
        return client.chat.completions.create(model="smol", temperature=0, max_tokens=8, messages=[
            {"role": "system", "content": system}, {"role": "user", "content": question}])
    before = metrics(srv.base)
    first, again, other = ask("Name a colour."), ask("Name a colour."), ask("Name a fruit.")
    n = first.usage.prompt_tokens
    check(n > 140, "the system prompt is long: %d tokens" % n)
    check(again.choices[0].message.content == first.choices[0].message.content, "a cached prompt changed the answer")
    cached = again.usage.prompt_tokens_details.cached_tokens
    check(64 <= cached < n, "repeated prompt: cached_tokens %d of %d" % (cached, n))
    check(other.usage.prompt_tokens_details.cached_tokens >= 64, "shared system prompt: %r" % other.usage)
    after = metrics(srv.base)
    hits = metric(after, "vllm:prefix_cache_hits") - metric(before, "vllm:prefix_cache_hits")
    queries = metric(after, "vllm:prefix_cache_queries") - metric(before, "vllm:prefix_cache_queries")
    check(hits >= cached + other.usage.prompt_tokens_details.cached_tokens, "prefix_cache_hits %s" % hits)
    check(queries >= 3 * n - 10, "prefix_cache_queries %s" % queries)
    check(metric(after, "mpkv:prefix_cache_blocks") > 0, "no cached block in /metrics")
    for name in ["mpkv:prefix_cache_bytes", "mpkv:prefix_cache_evictions_total", "mpkv:prefix_cache_shrinks_total"]:
        check(metric(after, name) is not None, "%s missing from /metrics" % name)
    check(re.search(r'^mpkv:prefix_cache_pages\{bits="16",', after, re.M), "mpkv:prefix_cache_pages{bits} missing")


def test_openai_fields(openai, client, srv):
    """Every field added for OpenAI / vLLM clients, through the official client."""
    base = srv.base
    # /tokenize and /detokenize: llama-server's and vLLM's shapes.
    text = "The capital of France is"
    llama = post_json(base, "/tokenize", {"content": text, "with_pieces": True})
    ids = [t["id"] for t in llama["tokens"]]
    check("".join(t["piece"] for t in llama["tokens"]) == text, "with_pieces: %r" % llama)
    vllm = post_json(base, "/tokenize", {"prompt": text, "add_special_tokens": False, "return_token_strs": True})
    check(vllm["tokens"] == ids and vllm["count"] == len(ids) and vllm["max_model_len"] == N_CTX, "vllm tokenize: %r" % vllm)
    detok = post_json(base, "/detokenize", {"tokens": ids})
    check(detok["content"] == text and detok["prompt"] == text, "detokenize: %r" % detok)
    chat_count = post_json(base, "/tokenize", {"messages": [{"role": "user", "content": "Say hi."}]})["count"]
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Say hi."}], max_tokens=1)
    check(r.usage.prompt_tokens == chat_count, "tokenize(messages) %d vs usage %d" % (chat_count, r.usage.prompt_tokens))
    check(r.usage.prompt_tokens_details.cached_tokens == 0, "cached_tokens: %r" % r.usage)

    # Token-id prompts and prompt lists give the text of the same prompt as a string; echo.
    def complete(prompt, max_tokens=8, temperature=0, **kw):
        return client.completions.create(model="smol", prompt=prompt, max_tokens=max_tokens, temperature=temperature, **kw)
    alone = complete(text).choices[0].text
    check(complete(post_json(base, "/tokenize", {"prompt": text})["tokens"]).choices[0].text == alone, "token-id prompt")
    other = "Once upon a time"
    r = complete([text, other])
    check([c.index for c in r.choices] == [0, 1] and r.choices[0].text == alone and
          r.choices[1].text == complete(other).choices[0].text, "prompt list: %r" % r)
    r = complete(text, echo=True)
    check(r.choices[0].text == text + alone, "echo: %r" % r.choices[0].text)
    # echo with logprobs: the prompt's tokens first (the first with null), then the same
    # generated tokens and logprobs as without echo.
    plain = complete(text, max_tokens=3, logprobs=2).choices[0].logprobs
    r = complete(text, max_tokens=3, logprobs=2, echo=True)
    lp, n_prompt = r.choices[0].logprobs, r.usage.prompt_tokens
    check(len(lp.tokens) == n_prompt + 3 and "".join(lp.tokens[:n_prompt]) == text, "echo logprobs tokens: %r" % lp.tokens)
    check(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "first prompt token: %r" % lp.token_logprobs[:2])
    check(all(x <= 0 for x in lp.token_logprobs[1:n_prompt]) and all(len(t) >= 1 for t in lp.top_logprobs[1:n_prompt]),
          "prompt logprobs: %r" % lp.token_logprobs[:n_prompt])
    check(lp.tokens[n_prompt:] == plain.tokens and
          all(abs(a - b) < 1e-3 for a, b in zip(lp.token_logprobs[n_prompt:], plain.token_logprobs)),
          "echo changed the generated logprobs: %r vs %r" % (lp.token_logprobs[n_prompt:], plain.token_logprobs))
    check(lp.text_offset[n_prompt] == len(text.encode()), "text_offset after the prompt: %r" % lp.text_offset)
    chunks = list(complete([text, other], echo=True, stream=True))
    streamed = ["", ""]
    for c in chunks:
        for ch in c.choices:
            streamed[ch.index] += ch.text
    check(streamed[0] == text + alone, "streamed echo + prompt list: %r" % streamed)

    # n: n choices of the same prompt (index 0..n-1); usage counts the prompt once. Greedy: n
    # copies of the one continuation; sampled with a seed: choice j uses seed + j, so the choices
    # differ and the request repeats.
    one = complete(text)
    r = complete(text, n=3)
    check([c.index for c in r.choices] == [0, 1, 2] and all(c.text == alone for c in r.choices), "n=3 greedy: %r" % r)
    check(r.usage.prompt_tokens == one.usage.prompt_tokens and r.usage.completion_tokens == 3 * one.usage.completion_tokens,
          "n=3 usage: %r vs %r" % (r.usage, one.usage))
    sampled = [c.text for c in complete(other, n=4, temperature=1.0, seed=11, max_tokens=8).choices]
    check(len(set(sampled)) >= 2, "n=4 sampled choices all alike: %r" % sampled)
    chunks = list(client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Say hi."}],
                                                 max_tokens=4, n=2, stream=True))
    streamed, finished = ["", ""], [None, None]
    for c in chunks:
        for ch in c.choices:
            streamed[ch.index] += ch.delta.content or ""
            finished[ch.index] = ch.finish_reason or finished[ch.index]
    check(all(streamed) and all(finished), "streamed chat n=2: %r %r" % (streamed, finished))

    # logit_bias: +100 forces a token; stop_token_ids then ends the request on it.
    forced = post_json(base, "/tokenize", {"prompt": " Paris", "add_special_tokens": False})["tokens"][0]
    piece = post_json(base, "/detokenize", {"tokens": [forced]})["content"]
    r = complete(text, logit_bias={str(forced): 100}, max_tokens=3)
    check(r.choices[0].text == piece * 3, "logit_bias +100: %r" % r.choices[0].text)
    r = complete(text, logit_bias={str(forced): 100}, extra_body={"stop_token_ids": [forced]})
    check(r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1 and r.choices[0].text == "",
          "stop_token_ids: %r" % r)
    # Penalties over the generated tokens: positive ones make a greedy continuation that repeats
    # itself use more distinct tokens, a negative one fewer.
    def distinct(prompt, **kw):
        toks = complete(prompt, max_tokens=24, logprobs=0, **kw).choices[0].logprobs.tokens
        check(len(toks) == 24, "24 tokens expected: %r" % toks)
        return len(set(toks))
    counting = "1, 2, 1, 2, 1, 2, 1, 2,"
    plain = distinct(counting)
    check(plain < 12, "the greedy continuation of %r should repeat itself (%d distinct tokens)" % (counting, plain))
    check(distinct(counting, frequency_penalty=2.0) > plain, "frequency_penalty 2 did not widen the output")
    check(distinct(counting, presence_penalty=-2.0) < plain, "presence_penalty -2 did not narrow the output")
    check(distinct(text, presence_penalty=2.0) > distinct(text), "presence_penalty 2 did not widen the output")
    r = complete(text, extra_body={"priority": -5})
    check(r.choices[0].text == alone, "priority does not change the tokens")

    # Each field out of range: 400 naming it.
    for kw, field in [({"presence_penalty": 2.5}, "presence_penalty"), ({"frequency_penalty": -3}, "frequency_penalty"),
                      ({"logit_bias": {"x": 1}}, "logit_bias"), ({"logit_bias": {"1": 101}}, "logit_bias"),
                      ({"logit_bias": {"99999999": 1}}, "logit_bias"), ({"n": 17}, "n"),
                      ({"extra_body": {"stop_token_ids": [-1]}}, "stop_token_ids"),
                      ({"extra_body": {"stop_token_ids": [99999999]}}, "stop_token_ids"),
                      ({"extra_body": {"priority": 1.5}}, "priority")]:
        expect_400(openai, lambda: complete(text, **kw), field, exact=False)
    expect_400(openai, lambda: complete([1, 99999999]), "prompt", exact=False)
    expect_400(openai, lambda: client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "x"}], n=17), "n", exact=False)
    status, _ = http_request(base, "POST", "/detokenize", json.dumps({"tokens": [99999999]}))
    check(status == 400, "detokenize of an unknown id: %d" % status)

    t = metrics(base)
    for name in ["vllm:request_prefill_time_seconds_count", "vllm:request_decode_time_seconds_count",
                 "vllm:request_inference_time_seconds_count", "vllm:request_prompt_tokens_count",
                 "vllm:request_generation_tokens_count"]:
        check((metric(t, name) or 0) >= 1, "metric %s missing or 0" % name)
    m = re.search(r'^vllm:request_success_total\{finished_reason="stop",[^}]*\} (\S+)$', t, re.M)
    check(m is not None and float(m.group(1)) >= 1, "request_success_total{stop}")
    print("openai fields: ok", flush=True)


def test_concurrent(openai, client, srv):
    n_good = len(TOPICS)
    alone = [run_good(client, i) for i in range(n_good)]
    check(all(alone), "an empty reference text")
    budget = BUDGET_MIB * 1048576
    peak = [0.0]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            used = metric(metrics(srv.base), "mpkv:kv_bytes_used")
            peak[0] = max(peak[0], used)
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    jobs = [("good", i) for i in range(n_good)] + [("bad", j) for j in range(32 - n_good)]
    jobs = jobs[::2] + jobs[1::2]  # interleave good and bad
    with futures.ThreadPoolExecutor(max_workers=32) as pool:
        fut = {pool.submit(run_good, client, x) if k == "good" else pool.submit(run_bad, openai, client, srv.base, x):
               (k, x) for k, x in jobs}
        done, pending = futures.wait(fut, timeout=600)
    stop.set()
    poller.join(5)
    check(not pending, "%d clients did not finish within 600 s" % len(pending))
    mismatches = []
    for f, (k, x) in fut.items():
        if k == "good":
            got = f.result()
            if got != alone[x]:
                mismatches.append("request %d %s: alone %r, concurrent %r" % (x, good_request(x)[:2], alone[x], got))
        else:
            want, got = f.result()
            check(got == want, "bad request %d got %d, want %d" % (x, got, want))
    print("concurrent: KV peak %.2f MiB of %.2f MiB budget" % (peak[0] / 1048576, budget / 1048576), flush=True)
    check(peak[0] <= budget, "KV bytes %d exceeded the budget %d" % (peak[0], budget))
    check(peak[0] > 0, "the poller never saw KV bytes in use")
    wait_kv_empty(srv.base, 30, "after the concurrent run")
    print("concurrent: %d bad requests got their 4xx; %d of %d good ones equal to their runs alone" % (
        32 - n_good, n_good - len(mismatches), n_good), flush=True)
    if mismatches:  # reported after the shutdown test has run too
        return "%d of %d good requests differ from their run alone at temperature 0 (batch-variant numerics?):\n  %s" % (
            len(mismatches), n_good, "\n  ".join(mismatches))
    return None


def open_long_stream(srv, events):
    """A streaming completion of LONG_TOKENS tokens, read until `events` SSE events came."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": LONG_TOKENS, "temperature": 0, "stream": True})
    conn.request("POST", "/v1/completions", body, {"Authorization": "Bearer " + API_KEY,
                                                   "Content-Type": "application/json"})
    resp = conn.getresponse()
    check(resp.status == 200, "stream status %d" % resp.status)
    got = b""
    while got.count(b"data: ") < events:
        chunk = resp.read1(4096)
        check(chunk, "stream ended early")
        got += chunk
    return conn, resp


def test_disconnect(srv):
    conn, _ = open_long_stream(srv, 3)
    check(metric(metrics(srv.base), "vllm:num_requests_running") >= 1, "the stream is not running")
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    wait_kv_empty(srv.base, 30, "after a client disconnected mid-stream")
    print("disconnect: the request was aborted and its pages freed", flush=True)


def wait_exit_0(srv, what):
    """The server exits 0 within 30 s of `what` (a signal it was sent)."""
    try:
        rc = srv.proc.wait(30)
    except subprocess.TimeoutExpired:
        srv.kill()
        fail("the server did not exit within 30 s of %s" % what)
    check(rc == 0, "exit code %d after %s; log:\n%s" % (rc, what, srv.read_log()))


def test_shutdown(srv):
    _, resp = open_long_stream(srv, 1)
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    status = 0
    for _ in range(50):  # the signal is taken within 0.2 s; then /health says 503
        status = http_request(srv.base, "GET", "/health", timeout=5)[0]
        if status != 200:
            break
        time.sleep(0.1)
    check(status == 503, "/health answered %d while draining" % status)
    rest = b""
    while True:
        chunk = resp.read1(4096)
        if not chunk:
            break
        rest += chunk
    wait_exit_0(srv, "SIGTERM")
    # It either finished within --shutdown-timeout or was aborted and told so; never cut silently.
    aborted = b"shutting down" in rest
    check(aborted or rest.endswith(b"data: [DONE]\r\n\r\n") or b"data: [DONE]" in rest,
          "the in-flight stream ended without [DONE] or an abort notice: %r" % rest[-300:])
    print("shutdown: exit 0 after %.1f s; the in-flight stream %s" % (
        time.time() - t0, "was aborted and told so" if aborted else "finished before the deadline"), flush=True)


def test_sigint_when_started_ignoring_it(mpkv, model):
    """A shell starts a background job with SIGINT ignored. A thread made before the server blocks
    the signal (OpenBLAS starts its threads when the library loads) takes an ignored SIGINT sent
    while the model loads and drops it, so the server would never stop: it takes the signal's
    action back to the default (server/shutdown.h), which /proc shows deterministically."""
    srv = mpkv_serve(mpkv, model, ["-c", "64", "--kv-budget-mib", "8"],
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    with open("/proc/%d/status" % srv.proc.pid) as f:
        ignored = int(re.search(r"^SigIgn:\s*([0-9a-f]+)$", f.read(), re.M).group(1), 16)
    if ignored & (1 << (signal.SIGINT - 1)):
        srv.kill()
        fail("the server kept SIGINT ignored as its parent left it")
    t0 = time.time()
    srv.proc.send_signal(signal.SIGINT)
    wait_exit_0(srv, "SIGINT (started with it ignored)")
    print("sigint: a server started with SIGINT ignored takes it again and exited 0 after %.1f s" % (
        time.time() - t0), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpkv", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--serve-args", default="--max-seqs 16",
                    help="more `mpkv serve` options (diagnosis: --max-seqs 1 runs every request alone)")
    args = ap.parse_args()
    model = need_model(args.source)
    if not model:
        return SKIP
    openai, = need_packages("openai")
    srv = mpkv_serve(args.mpkv, model, ["-c", str(N_CTX), "--kv-budget-mib", str(BUDGET_MIB), "--shutdown-timeout", "2",
                                        "--served-model-name", "smol", "--probe-machine-limits"] + args.serve_args.split())

    def run():
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
        test_basics(openai, client, srv)
        test_roofline_counters(client, srv, model)
        test_vllm_fields(openai, client, srv)
        test_openai_fields(openai, client, srv)
        test_prefix_cache(client, srv)
        test_disconnect(srv)
        mismatch = test_concurrent(openai, client, srv)
        test_shutdown(srv)
        test_sigint_when_started_ignoring_it(args.mpkv, model)
        if mismatch:
            fail(mismatch)
    return run_against(srv, run)


if __name__ == "__main__":
    sys.exit(main())

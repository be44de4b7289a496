#!/usr/bin/env python3
"""Output tok/s of a batch of constrained requests against the same batch unconstrained
(docs/structured_outputs.md; goal: constrained >= 0.9x).

Starts `mpkv serve`, then runs rounds of N concurrent chat requests (default 16), alternating
which mode goes first in each round: "constrained" (response_format json_schema: an object holding an
array of at least 30 line items, so no answer completes before max_tokens) and "free" (no
constraint, ignore_eos, so every answer also runs to max_tokens). Every request generates exactly
max_tokens tokens (checked). Prints each round, the medians of output tok/s (completion tokens / the
round's wall time) and their ratio, the mask phase's time from /metrics over the constrained
rounds (per step that filled masks, in all, and as a share of those rounds' wall time), and the
rows of those rounds: masks filled, rows checked first (check-first sampling), and of those the
ones that needed no mask.

Usage: structured_throughput.py --mpkv BUILD/mpkv --model MODEL.gguf [--n 16] [--rounds 5] [--max-tokens 64]
                               [--schema items|words]
"""
import argparse
import concurrent.futures as futures
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

# "items": an order's line items (free strings, an enum, an integer); "words": short strings (maxLength
# 10, which xgrammar cannot precompute masks for: see docs/results/structured_outputs.md).
SCHEMAS = {
    "items": {"type": "object",
              "properties": {"items": {"type": "array", "minItems": 30,
                                       "items": {"type": "object",
                                                 "properties": {"name": {"type": "string"}, "qty": {"type": "integer"},
                                                                "size": {"enum": ["S", "M", "L"]}},
                                                 "required": ["name", "qty", "size"], "additionalProperties": False}}},
              "required": ["items"], "additionalProperties": False},
    "words": {"type": "object",
              "properties": {"words": {"type": "array", "minItems": 60, "items": {"type": "string", "maxLength": 10}}},
              "required": ["words"], "additionalProperties": False},
}
SCHEMA = SCHEMAS["items"]
TOPICS = ["the sea", "a cat", "winter", "bread", "a train", "the moon", "music", "a garden", "rain", "chess",
          "a library", "coffee", "mountains", "a bicycle", "the sun", "a river", "friendship", "a clock",
          "autumn", "a lighthouse", "snow", "a violin", "the desert", "a forest", "a bridge", "tea", "a storm",
          "a market", "glass", "a kite", "the wind", "a map"]


def post(base, body, timeout=600):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def request(i, constrained, max_tokens):
    body = {"model": "m", "max_tokens": max_tokens, "temperature": 0.7, "seed": i,
            "messages": [{"role": "user", "content": "List words about %s." % TOPICS[i % len(TOPICS)]}]}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "words", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    return body


def run_round(base, n, constrained, max_tokens):
    t0 = time.time()
    with futures.ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(lambda i: post(base, request(i, constrained, max_tokens)), range(n)))
    wall = time.time() - t0
    tokens = sum(r["usage"]["completion_tokens"] for r in results)
    short = [r["choices"][0]["finish_reason"] for r in results if r["usage"]["completion_tokens"] != max_tokens]
    if short:
        sys.exit("a %s request stopped before max_tokens (%s): the comparison would be unequal" % (
            "constrained" if constrained else "free", short))
    return tokens / wall, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpkv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schema", choices=sorted(SCHEMAS), default="items")
    args = ap.parse_args()
    global SCHEMA
    SCHEMA = SCHEMAS[args.schema]
    cmd = [args.mpkv, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads), "-c", "1024",
           "--max-seqs", str(args.n)]
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "structured_throughput_%d.log" % os.getpid()), "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        port = int(re.match(r"listening on http://127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1))
        base = "http://127.0.0.1:%d" % port
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=5)
                break
            except Exception:
                time.sleep(0.2)
        with open("/proc/loadavg") as f:
            print("command: %s" % " ".join(sys.argv), flush=True)
            print("serve: %s" % " ".join(cmd))
            print("load average before: %s" % " ".join(f.read().split()[:3]))
        run_round(base, args.n, True, 8)  # warm-up: compiles the schema, touches both paths
        run_round(base, args.n, False, 8)
        rates = {True: [], False: []}
        mask_s = mask_steps = 0.0
        steps_constrained = 0.0
        tried = skipped = masked_rows = 0.0
        for r in range(args.rounds):
            for constrained in ((True, False) if r % 2 == 0 else (False, True)):
                names = ["mpkv:grammar_mask_seconds_total", "mpkv:grammar_mask_steps_total",
                         "mpkv:grammar_check_first_rows_total", "mpkv:grammar_mask_skipped_rows_total",
                         "mpkv:grammar_mask_rows_total"]
                before = [metric(base, n) for n in names]
                rate, wall = run_round(base, args.n, constrained, args.max_tokens)
                rates[constrained].append(rate)
                if constrained:
                    d = [metric(base, n) - b for n, b in zip(names, before)]
                    mask_s += d[0]
                    mask_steps += d[1]
                    tried += d[2]
                    skipped += d[3]
                    masked_rows += d[4]
                    steps_constrained += wall
                print("round %d %-11s %7.1f output tok/s  (%d x %d tokens in %.2f s)" % (
                    r, "constrained" if constrained else "free", rate, args.n, args.max_tokens, wall), flush=True)
        c, f = statistics.median(rates[True]), statistics.median(rates[False])
        print("median output tok/s: constrained %.1f, free %.1f, ratio %.3f (goal >= 0.9)" % (c, f, c / f))
        if mask_steps:
            # steps_constrained: the constrained rounds' wall time. With check-first sampling many
            # steps fill no mask, so the share of that time is the figure to compare across builds.
            print("mask phase: %.3f ms per step over %d steps that filled masks (%d rows each at most); "
                  "%.3f s in all, %.1f%% of the constrained rounds' %.1f s" % (
                      1000 * mask_s / mask_steps, mask_steps, args.n, mask_s, 100 * mask_s / steps_constrained,
                      steps_constrained))
        print("rows of the constrained rounds: %d masks filled, %d checked first, %d of them without a mask" % (
            masked_rows, tried, skipped))
        with open("/proc/loadavg") as fl:
            print("load average after: %s" % " ".join(fl.read().split()[:3]))
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()

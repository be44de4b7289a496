#!/usr/bin/env python3
"""Validity of constrained answers over a schema corpus (docs/results/structured_outputs.md; goal:
every answer valid against its schema, every unsupported feature refused with a 400).

Serves bench/schema_corpus.py's seeded schemas through `mpkv serve` with the official openai client,
`--concurrency` requests at once, each schema greedy (temperature 0) and sampled (temperature 0.8,
top_p 0.95, seed = its index), the constraint sent in the four spellings in turn (OpenAI's
response_format json_schema, vLLM's guided_json and structured_outputs.json, llama-server's
json_schema). Every answer ending with finish_reason "stop" is parsed and validated with jsonschema
(Draft 2020-12, with its format checker: every format the corpus uses must have a checker, else the run
stops); a "length" finish (max_tokens inside the object) is counted apart, not as invalid. A schema
meant to be refused must get a 400 whose `param` is its field and whose message names the feature;
one meant to pass must not be refused. A 503 (the grammar compiler's queue is busy) is retried after
its Retry-After, as a client should, and counted. Prints the tallies and every failure; exits 1 on an invalid
answer, a missed refusal or an unexpected one. `--report FILE` writes every answer as JSON.

Usage: structured_validity.py --mpkv BUILD/mpkv --model MODEL.gguf [--seed 34] [--n 240]
                              [--concurrency 8] [--max-tokens 256] [--report FILE]
Needs: openai, jsonschema[format-nongpl] (scripts/bench_env.sh openai 'jsonschema[format-nongpl]').
"""
import argparse
import collections
import concurrent.futures as futures
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from schema_corpus import FORMATS, corpus, digest  # noqa: E402
from serve_servers import mpkv_server  # noqa: E402

# (request fields holding the schema, the param a refusal must name)
SPELLINGS = [
    (lambda s: {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": s, "strict": True}}},
     "response_format.json_schema.schema"),
    (lambda s: {"guided_json": s}, "guided_json"),
    (lambda s: {"structured_outputs": {"json": s}}, "structured_outputs.json"),
    (lambda s: {"json_schema": s}, "json_schema"),
]
MODES = {"greedy": {"temperature": 0}, "sampled": {"temperature": 0.8, "top_p": 0.95}}


def ask(client, openai, entry, i, mode, max_tokens):
    fields, param = SPELLINGS[i % len(SPELLINGS)]
    kw = dict(MODES[mode])
    if mode == "sampled":
        kw["seed"] = i
    for busy in range(21):  # 503: the grammar compiler's queue is busy; retry after Retry-After, as told
        try:
            r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": entry["prompt"]}],
                                               max_tokens=max_tokens, extra_body=fields(entry["schema"]), **kw)
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            err = body["error"] if isinstance(body.get("error"), dict) else body  # the client may unwrap it
            return {"status": 400, "param": err.get("param"), "message": err.get("message", str(e)),
                    "want_param": param, "busy_retries": busy}
        except openai.APIStatusError as e:
            if e.status_code != 503 or busy == 20:
                raise
            time.sleep(float(e.response.headers.get("Retry-After", "1")))
            continue
        c = r.choices[0]
        return {"status": 200, "finish": c.finish_reason, "text": c.message.content or "",
                "tokens": r.usage.completion_tokens, "busy_retries": busy}


def judge(validator_for, entry, res):
    """'valid', 'invalid: ...' for a stop answer; None for the other outcomes."""
    if res["status"] != 200 or res["finish"] != "stop":
        return None
    try:
        value = json.loads(res["text"])
    except ValueError as e:
        return "invalid: not JSON (%s)" % e
    errors = sorted(validator_for(entry["schema"]).iter_errors(value), key=lambda e: list(e.path))
    return "invalid: %s at %s" % (errors[0].message, "/".join(map(str, errors[0].path))) if errors else "valid"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpkv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--n", type=int, default=240)
    ap.add_argument("--first", type=int, default=0, help="serve only entries first.. of the corpus (diagnosis)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="greedy,sampled")
    ap.add_argument("--report")
    args = ap.parse_args()
    import jsonschema
    import openai
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER  # 2020-12's formats (FormatChecker() mixes in draft 3's "time")
    missing = [f for f in FORMATS if f not in checker.checkers]
    if missing:
        sys.exit("jsonschema has no checker for the formats %s: pip install 'jsonschema[format-nongpl]'" % missing)

    def validator_for(schema):
        return jsonschema.Draft202012Validator(schema, format_checker=checker)

    entries = corpus(args.seed, args.n)
    print("command: %s" % " ".join(sys.argv))
    print("corpus: %d schemas, seed %d, sha256 %s" % (len(entries), args.seed, digest(entries)), flush=True)
    log = os.path.join(tempfile.gettempdir(), "structured_validity_%d.log" % os.getpid())
    modes = args.modes.split(",")
    jobs = []  # (entry index, mode): every schema to accept in every mode; each one to refuse once
    for i, e in enumerate(entries):
        if i < args.first:
            continue
        for m in (modes if e["expect"] == "accept" else modes[:1]):
            jobs.append((i, m))
    t0 = time.time()
    with mpkv_server(args.mpkv, args.model, [], args.threads, 1024, args.concurrency, 64, log) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=900)
        with futures.ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            results = list(pool.map(lambda j: ask(client, openai, entries[j[0]], j[0], j[1], args.max_tokens), jobs))
    wall = time.time() - t0
    tally = collections.Counter()
    failures, rows = [], []
    for (i, mode), res in zip(jobs, results):
        e = entries[i]
        verdict = judge(validator_for, e, res)
        rows.append({"name": e["name"], "mode": mode, "expect": e["expect"], "verdict": verdict, **res})
        if e["expect"] != "accept":
            keyword = e["expect"].split(":", 1)[1]
            named = res["status"] == 400 and res["param"] == res["want_param"] and keyword in res["message"]
            tally["refusal expected, got: " + ("400 naming it" if named else "other")] += 1
            tally["refused: " + keyword] += named
            if not named:
                failures.append("%s (%s): expected a 400 naming '%s' in %s, got %s" % (
                    e["name"], mode, keyword, res.get("want_param"), json.dumps(res)[:300]))
            continue
        if res["status"] == 400:
            tally[mode + " refused unexpectedly"] += 1
            failures.append("%s (%s): refused: %s" % (e["name"], mode, res["message"]))
            continue
        tally[mode + " finish " + res["finish"]] += 1
        if verdict:
            tally[mode + " " + verdict.split(":")[0]] += 1
            if verdict != "valid":
                failures.append("%s (%s): %s\n    schema %s\n    text %r" % (
                    e["name"], mode, verdict, json.dumps(e["schema"]), res["text"]))
    for k in sorted(tally):
        print("%-40s %d" % (k, tally[k]))
    for m in modes:
        stops = tally[m + " finish stop"]
        print("%s: %d valid of %d complete answers (%d more cut by max_tokens: finish_reason length)" % (
            m, tally[m + " valid"], stops, tally[m + " finish length"]))
    print("%d requests in %.0f s (loaded machine; not a speed figure); %d retries after a 503 (compiler busy)" % (
        len(jobs), wall, sum(r["busy_retries"] for r in results)))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(rows, f, indent=1)
    for f in failures:
        print("FAILURE: " + f)
    print("FAIL (%d)" % len(failures) if failures else "PASS", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

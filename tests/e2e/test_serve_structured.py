#!/usr/bin/env python3
"""Structured outputs of `mpkv serve` with the official `openai` client (docs/structured_outputs.md).

Starts the server with the real SmolLM2 model, then, each answer validated with `jsonschema` (or the
equivalent Python regex) whatever the model would have said unconstrained:
  1. client.chat.completions.parse with a pydantic model (response_format json_schema, strict);
  2. response_format json_object; json_schema with nested objects, arrays, enums and patterns;
  3. vLLM's structured_outputs choice / regex / grammar and guided_json / guided_choice, llama-server's
     json_schema and GBNF grammar; /v1/completions as well as chat;
  4. n = 3 sampled under one schema, streaming, logprobs, the prefix cache (a repeated request);
  5. 400s naming the field: malformed, unsupported, recursive and huge schemas, two constraining
     fields, min_tokens with a grammar; the metrics (constrained requests, compiles, cache hits, masks,
     check-first rows).
Every wait is bounded. Exit code 77 (CTest: skipped) when the model is absent.
Usage: test_serve_structured.py --mpkv BUILD/mpkv --source SOURCE_DIR
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_e2e import (API_KEY, SKIP, check, expect_400, fail, metric, metrics, mpkv_serve, need_model,  # noqa: E402
                       need_packages, run_against)

MAX_TOKENS = 160
CACHED_MAX_TOKENS = 140  # with the long system prompt: prompt + this fit the 8 MiB KV budget (4 pages of 64)

PERSON_PROMPT = "Describe a fictional person as JSON: their name, age and favourite colour."

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                                      "city": {"type": "string", "maxLength": 24}},
                     "required": ["name", "city"], "additionalProperties": False},
        "items": {"type": "array", "minItems": 1, "maxItems": 3,
                  "items": {"type": "object",
                            "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                                           "size": {"enum": ["S", "M", "L"]},
                                           "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                            "required": ["sku", "size", "qty"], "additionalProperties": False}},
        "express": {"type": "boolean"},
    },
    "required": ["customer", "items", "express"],
    "additionalProperties": False,
}


def user(text):
    return [{"role": "user", "content": text}]


def validated(jsonschema, text, schema, what):
    try:
        value = json.loads(text)
    except ValueError as e:
        fail("%s: not JSON (%s): %r" % (what, e, text))
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        fail("%s: invalid against its schema (%s): %r" % (what, e.message, text))
    return value


def test_parse_pydantic(client, jsonschema):
    from pydantic import BaseModel, Field
    from typing import Literal

    class Person(BaseModel):
        name: str = Field(max_length=20)
        age: int = Field(ge=0, le=120)
        colour: Literal["red", "green", "blue"]

    r = client.chat.completions.parse(model="smol", messages=user(PERSON_PROMPT), response_format=Person,
                                      temperature=0, max_tokens=MAX_TOKENS)
    msg = r.choices[0].message
    check(r.choices[0].finish_reason == "stop", "parse: finish_reason %s" % r.choices[0].finish_reason)
    check(isinstance(msg.parsed, Person), "parse: no Person parsed from %r" % msg.content)
    validated(jsonschema, msg.content, Person.model_json_schema(), "parse")
    check(list(json.loads(msg.content).keys()) == ["name", "age", "colour"], "parse: properties out of order: %s" % msg.content)
    print("parse (pydantic): %s" % msg.content, flush=True)


def test_json_fields(client, jsonschema):
    r = client.chat.completions.create(model="smol", messages=user("Give a JSON object about a cat."), temperature=0,
                                       max_tokens=MAX_TOKENS, response_format={"type": "json_object"})
    text = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        check(isinstance(json.loads(text), dict), "json_object: not an object: %r" % text)
    else:  # cut by max_tokens: still the start of one object
        check(r.choices[0].finish_reason == "length" and text.startswith("{"), "json_object: %r" % text)
    rf = {"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER_SCHEMA, "strict": True}}
    r = client.chat.completions.create(model="smol", messages=user("Write an order of T-shirts as JSON."), temperature=0,
                                       max_tokens=MAX_TOKENS, response_format=rf)
    check(r.choices[0].finish_reason == "stop", "json_schema: finish_reason %s: %r" % (
        r.choices[0].finish_reason, r.choices[0].message.content))
    validated(jsonschema, r.choices[0].message.content, ORDER_SCHEMA, "json_schema (nested)")
    # The same schema through vLLM's and llama-server's fields, and /v1/completions.
    for extra in ({"guided_json": ORDER_SCHEMA}, {"structured_outputs": {"json": json.dumps(ORDER_SCHEMA)}},
                  {"json_schema": ORDER_SCHEMA}):
        r = client.chat.completions.create(model="smol", messages=user("An order, as JSON."), temperature=0,
                                           max_tokens=MAX_TOKENS, extra_body=extra)
        validated(jsonschema, r.choices[0].message.content, ORDER_SCHEMA, "json_schema via %s" % list(extra)[0])
    r = client.completions.create(model="smol", prompt="Order: ", temperature=0, max_tokens=MAX_TOKENS,
                                  extra_body={"response_format": rf})
    validated(jsonschema, r.choices[0].text, ORDER_SCHEMA, "json_schema on /v1/completions")
    print("json_object, json_schema (4 spellings, both endpoints): ok", flush=True)


def test_choice_regex_grammar(client):
    choices = ["positive", "negative", "neutral"]
    for extra in ({"structured_outputs": {"choice": choices}}, {"guided_choice": choices}):
        r = client.chat.completions.create(model="smol", messages=user("Sentiment of 'I love this!'?"), temperature=0,
                                           max_tokens=8, extra_body=extra)
        check(r.choices[0].message.content in choices and r.choices[0].finish_reason == "stop",
              "choice via %s: %r" % (list(extra)[0], r.choices[0].message.content))
    phone = r"\(\d{3}\) \d{3}-\d{4}"
    for extra in ({"structured_outputs": {"regex": phone}}, {"guided_regex": phone}):
        r = client.completions.create(model="smol", prompt="Call us at ", temperature=0, max_tokens=20, extra_body=extra)
        check(re.fullmatch(phone, r.choices[0].text), "regex via %s: %r" % (list(extra)[0], r.choices[0].text))
    gbnf = 'root ::= "Answer: " ("yes" | "no") ", because " [a-z ]{1,30} "."'
    for extra in ({"grammar": gbnf}, {"guided_grammar": gbnf}, {"structured_outputs": {"grammar": gbnf}}):
        r = client.chat.completions.create(model="smol", messages=user("Is the sky blue?"), temperature=0,
                                           max_tokens=48, extra_body=extra)
        text = r.choices[0].message.content
        check(re.fullmatch(r"Answer: (yes|no), because [a-z ]{1,30}\.", text), "GBNF via %s: %r" % (list(extra)[0], text))
    print("choice, regex, GBNF (every spelling): ok", flush=True)


def test_n_stream_logprobs_cache(client, jsonschema):
    rf = {"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER_SCHEMA}}
    # A system prompt longer than a KV page, so a repeated request reads it from the prefix cache.
    system = " ".join("Rule %d: answer with one JSON order and nothing else." % i for i in range(6))

    def user(text):
        return [{"role": "system", "content": system}, {"role": "user", "content": text}]
    r = client.chat.completions.create(model="smol", messages=user("An order, as JSON."), temperature=1.0, seed=7, n=3,
                                       max_tokens=CACHED_MAX_TOKENS, response_format=rf)
    check(len(r.choices) == 3, "n=3 gave %d choices" % len(r.choices))
    for c in r.choices:
        check(c.finish_reason == "stop", "n=3 choice %d: finish_reason %s" % (c.index, c.finish_reason))
        validated(jsonschema, c.message.content, ORDER_SCHEMA, "n=3 choice %d" % c.index)
    text, finish = "", None
    for chunk in client.chat.completions.create(model="smol", messages=user("An order, as JSON."), temperature=0,
                                                max_tokens=CACHED_MAX_TOKENS, response_format=rf, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    check(finish == "stop", "stream: finish_reason %s" % finish)
    validated(jsonschema, text, ORDER_SCHEMA, "stream")
    plain = client.chat.completions.create(model="smol", messages=user("An order, as JSON."), temperature=0,
                                           max_tokens=CACHED_MAX_TOKENS, response_format=rf)
    check(plain.choices[0].message.content == text, "stream and non-stream differ at temperature 0")
    r = client.chat.completions.create(model="smol", messages=user("An order, as JSON."), temperature=0,
                                       max_tokens=CACHED_MAX_TOKENS, response_format=rf, logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs.content
    check(r.choices[0].message.content == text, "logprobs changed the answer")
    check(len(lp) == r.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in lp),
          "logprobs: %d entries for %d tokens" % (len(lp), r.usage.completion_tokens))
    details = r.usage.prompt_tokens_details
    check(details is not None and (details.cached_tokens or 0) > 0, "the repeated prompt was not read from the prefix cache")
    # Cut by max_tokens inside the object: "length", and the text so far is a prefix of the full answer.
    r = client.chat.completions.create(model="smol", messages=user("An order, as JSON."), temperature=0, max_tokens=5,
                                       response_format=rf)
    check(r.choices[0].finish_reason == "length" and text.startswith(r.choices[0].message.content),
          "max_tokens inside the object: %s %r" % (r.choices[0].finish_reason, r.choices[0].message.content))
    print("n=3, stream, logprobs, prefix cache, length: ok", flush=True)


def test_refusals(openai, client):
    def chat(**extra):
        return lambda: client.chat.completions.create(model="smol", messages=user("x"), max_tokens=4, extra_body=extra)

    def rf(schema):
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}

    recursive = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    huge = {"type": "object", "properties": {"p%d" % i: {"type": "string", "description": "x" * 40} for i in range(1500)}}
    cases = [
        (chat(**rf("not a schema")), "response_format.json_schema.schema"),
        (chat(**rf({"type": "array", "uniqueItems": True})), "response_format.json_schema.schema"),
        (chat(**rf(recursive)), "response_format.json_schema.schema"),
        (chat(**rf(huge)), "response_format.json_schema.schema"),
        (chat(guided_json='{"type": '), "guided_json"),
        (chat(guided_regex="(unclosed"), "guided_regex"),
        (chat(grammar="root ::= missing_rule"), "grammar"),
        (chat(guided_choice=[]), "guided_choice"),
        (chat(response_format={"type": "yaml"}), "response_format.type"),
        (chat(structured_outputs={"json": {}, "regex": "a"}), "structured_outputs.regex"),
        (chat(guided_regex="a+", grammar='root ::= "a"'), "grammar"),  # the second one is named
        (chat(guided_regex="a+", min_tokens=2), "min_tokens"),
    ]
    for fn, field in cases:
        expect_400(openai, fn, field)
    print("refusals: %d bad constraints got 400s naming their field" % len(cases), flush=True)


def test_metrics(srv):
    t = metrics(srv.base)
    for name, at_least in [("mpkv:constrained_requests_total", 20), ("mpkv:grammar_compiles_total", 5),
                           ("mpkv:grammar_cache_hits_total", 3), ("mpkv:grammar_compile_errors_total", 5),
                           ("mpkv:grammar_mask_steps_total", 100), ("mpkv:grammar_mask_rows_total", 100)]:
        v = metric(t, name)
        check(v is not None and v >= at_least, "metric %s = %s, expected >= %d" % (name, v, at_least))
    check(metric(t, "mpkv:grammar_mask_seconds_total") > 0, "no mask time")
    # Check-first sampling (the greedy requests): rows drawn without a mask first, some taken.
    tried, skipped = metric(t, "mpkv:grammar_check_first_rows_total"), metric(t, "mpkv:grammar_mask_skipped_rows_total")
    check(tried is not None and skipped is not None and 0 < skipped <= tried,
          "check-first rows %s, of which taken without a mask %s" % (tried, skipped))
    check(metric(t, "mpkv:grammar_compile_seconds_total") > 0, "no compile time")
    steps = metric(t, "mpkv:grammar_mask_steps_total")
    print("metrics: ok (mask %.3f ms per step over %d steps; %d of %d check-first rows needed no mask)" % (
        1000 * metric(t, "mpkv:grammar_mask_seconds_total") / steps, steps, skipped, tried), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpkv", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    model = need_model(args.source)
    if not model:
        return SKIP
    jsonschema, openai, _ = need_packages("jsonschema", "openai", "pydantic")
    srv = mpkv_serve(args.mpkv, model, ["-c", "512", "--kv-budget-mib", "8", "--shutdown-timeout", "2",
                                        "--served-model-name", "smol", "--max-seqs", "8"])

    def run():
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)
        test_parse_pydantic(client, jsonschema)
        test_json_fields(client, jsonschema)
        test_choice_regex_grammar(client)
        test_n_stream_logprobs_cache(client, jsonschema)
        test_refusals(openai, client)
        test_metrics(srv)
    return run_against(srv, run)


if __name__ == "__main__":
    sys.exit(main())

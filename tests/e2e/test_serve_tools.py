#!/usr/bin/env python3
"""End-to-end test of tool calls and thinking with the official `openai` client (docs/serving.md,
"Tool calls", "Reasoning").

Part 1, deterministic: mpkv_script_serve (the real HTTP server and handler over ScriptBackend, whose
"model" repeats the last user message, or reports the last tool result) with real model templates
from llama.cpp's models/templates (Qwen 2.5 for Hermes calls, Qwen 3 for thinking):
  - a tool-calling loop, tool_choice auto: tools -> message.tool_calls (finish_reason "tool_calls")
    -> the assistant message and a tool message sent back -> the final answer;
  - the same calls streamed: the client's own stream helper assembles the tool-call deltas, which
    carry the arguments in pieces as they are generated (OpenAI's delta sequence);
  - parallel_tool_calls false: the request ends once the first call is complete (usage shows it);
  - thinking split into reasoning_content (and `reasoning`), streamed and not;
  - hostile inputs get 400 naming the field: an unknown tool in tool_choice, malformed tool_calls in
    the history, a tool list over the limit, legacy `functions`, required / named tool_choice (not
    served until constrained decoding lands).
Part 2, the real default model (SmolLM2-135M under `mpkv serve`), when present: a request with tools
and tool_choice auto; SmolLM2's template does not render tools, so no call is expected and the test
prints what the model said; tool_choice required / named (calls under the grammar), streamed and not.
Exit 77 (CTest: skipped) when the openai package is missing.
Usage: test_serve_tools.py --script-server BUILD/mpkv_script_serve --mpkv BUILD/mpkv --source DIR --templates DIR
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_e2e import SKIP, ServerProcess, check, expect_400, model_path, mpkv_serve  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
                                      "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                                      "b": {"type": "integer"}}}}},
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO_CALLS = CALL + '\n<tool_call>\n{"name": "add", "arguments": {"a": 40, "b": 2}}\n</tool_call>'


def user(text):
    return [{"role": "user", "content": text}]


def test_tool_loop(client):
    """tools -> tool_calls -> tool message -> answer, as an agent loop does it."""
    messages = user(CALL)
    r = client.chat.completions.create(model="script", messages=messages, tools=TOOLS, tool_choice="auto")
    choice = r.choices[0]
    check(choice.finish_reason == "tool_calls", "finish_reason %r" % choice.finish_reason)
    calls = choice.message.tool_calls
    check(calls and len(calls) == 1, "tool_calls %r" % calls)
    call = calls[0]
    check(call.type == "function" and call.function.name == "get_weather", "call %r" % call)
    check(json.loads(call.function.arguments) == {"city": "Paris"}, "arguments %r" % call.function.arguments)
    check(call.id.startswith("call_"), "id %r" % call.id)
    check(not choice.message.content, "content beside the call: %r" % choice.message.content)
    # The loop: the assistant message as the client holds it, then the tool's result.
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
    r2 = client.chat.completions.create(model="script", messages=messages, tools=TOOLS)
    check(r2.choices[0].finish_reason == "stop", "second turn finish_reason %r" % r2.choices[0].finish_reason)
    check(r2.choices[0].message.content == "The tool said: sunny, 21 C", "answer %r" % r2.choices[0].message.content)
    check(not r2.choices[0].message.tool_calls, "a call in the answer")
    print("tool loop: get_weather(%s) -> %r" % (call.function.arguments, r2.choices[0].message.content), flush=True)


def test_streamed_calls(client):
    """Two calls streamed; the client's stream helper assembles them into the final message."""
    with client.chat.completions.stream(model="script", messages=user("Checking. " + TWO_CALLS), tools=TOOLS) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    c = final.choices[0]
    check(c.finish_reason == "tool_calls", "streamed finish_reason %r" % c.finish_reason)
    check(c.message.content == "Checking. ", "streamed content %r" % c.message.content)
    names = [t.function.name for t in c.message.tool_calls]
    check(names == ["get_weather", "add"], "streamed calls %r" % names)
    check(json.loads(c.message.tool_calls[1].function.arguments) == {"a": 40, "b": 2}, "streamed arguments")
    check(len({t.id for t in c.message.tool_calls}) == 2, "ids not distinct")
    # Raw deltas: the first of each call names it, later ones carry only arguments.
    chunks = list(client.chat.completions.create(model="script", messages=user(CALL), tools=TOOLS, stream=True))
    deltas = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])] if chunks else []
    check(deltas and deltas[0].id and deltas[0].function.name == "get_weather", "first delta %r" % deltas[:1])
    check(all(d.id is None for d in deltas[1:]), "later deltas repeat the id")
    check("".join(d.function.arguments or "" for d in deltas) == '{"city":"Paris"}', "argument fragments")
    check(all("<tool_call>" not in (ch.choices[0].delta.content or "") for ch in chunks if ch.choices), "markup streamed")
    # The arguments go out as they are generated (the script model writes a byte per step), OpenAI's
    # sequence: a head with name and arguments "", then pieces with only index and arguments.
    chunks = list(client.chat.completions.create(model="script", messages=user(TWO_CALLS), tools=TOOLS, stream=True))
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    for k, name, args in ((0, "get_weather", '{"city":"Paris"}'), (1, "add", '{"a":40,"b":2}')):
        mine = [d for d in deltas if d.index == k]
        check(mine[0].id and mine[0].type == "function" and mine[0].function.name == name and mine[0].function.arguments == "",
              "head of call %d: %r" % (k, mine[0]))
        check(all(d.id is None and d.function.name is None for d in mine[1:]), "later deltas of call %d name it" % k)
        check(len(mine) > 3, "call %d's arguments in %d deltas" % (k, len(mine) - 1))
        check("".join(d.function.arguments for d in mine) == args, "call %d's arguments pieces" % k)
    print("streamed add(): " + " ".join(json.dumps(d.model_dump(exclude_none=True)) for d in deltas if d.index == 1), flush=True)


def test_parallel_false(client):
    """parallel_tool_calls false: the request ends once the first call is complete (its tokens only)."""
    both = client.chat.completions.create(model="script", messages=user(TWO_CALLS), tools=TOOLS)
    r = client.chat.completions.create(model="script", messages=user(TWO_CALLS), tools=TOOLS, parallel_tool_calls=False)
    c = r.choices[0]
    check(c.finish_reason == "tool_calls", "finish_reason %r" % c.finish_reason)
    check([t.function.name for t in c.message.tool_calls] == ["get_weather"], "calls %r" % c.message.tool_calls)
    # The script model generates a token per byte: the first call's bytes, nothing of the second.
    check(r.usage.completion_tokens == len(CALL.encode()), "completion_tokens %d, the first call is %d bytes (both: %d)" %
          (r.usage.completion_tokens, len(CALL.encode()), both.usage.completion_tokens))
    check(both.usage.completion_tokens > r.usage.completion_tokens, "both calls: %d tokens" % both.usage.completion_tokens)
    with client.chat.completions.stream(model="script", messages=user(TWO_CALLS), tools=TOOLS, parallel_tool_calls=False,
                                        stream_options={"include_usage": True}) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    fc = final.choices[0]
    check(fc.finish_reason == "tool_calls" and len(fc.message.tool_calls) == 1, "streamed %r" % fc)
    check(fc.message.tool_calls[0].function.arguments == c.message.tool_calls[0].function.arguments, "streamed arguments")
    check(final.usage.completion_tokens == r.usage.completion_tokens, "streamed usage %r" % final.usage)
    print("parallel_tool_calls false: %d completion tokens (both calls: %d)" % (r.usage.completion_tokens, both.usage.completion_tokens),
          flush=True)


def test_thinking(client):
    text = "<think>\nThe user greets me.\n</think>\n\nHello!"
    r = client.chat.completions.create(model="script", messages=user(text))
    m = r.choices[0].message
    extra = m.model_extra or {}
    check(m.content == "Hello!", "content %r" % m.content)
    check(extra.get("reasoning_content") == "The user greets me.\n", "reasoning_content %r" % extra)
    check(extra.get("reasoning") == extra.get("reasoning_content"), "reasoning %r" % extra)
    content, reasoning = "", ""
    for ch in client.chat.completions.create(model="script", messages=user(text), stream=True):
        if ch.choices:
            d = ch.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
    check(content == "Hello!" and reasoning == "The user greets me.\n", "streamed %r / %r" % (content, reasoning))


def test_hostile(openai, client):
    c = client.chat.completions.create
    expect_400(openai, lambda: c(model="script", messages=user("x"), tools=TOOLS,
                                 tool_choice={"type": "function", "function": {"name": "nope"}}),
               "tool_choice.function.name", "unknown tool")
    bad_history = user("x") + [{"role": "assistant", "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}]
    expect_400(openai, lambda: c(model="script", messages=bad_history, tools=TOOLS),
               "messages[1].tool_calls[0].function.arguments", "malformed history")
    expect_400(openai, lambda: c(model="script", messages=user("x") + [{"role": "tool", "content": "r"}]),
               "messages[1].tool_call_id", "tool message without id")
    huge = [{"type": "function", "function": {"name": "f%d" % i, "parameters": {"type": "object"}}} for i in range(500)]
    expect_400(openai, lambda: c(model="script", messages=user("x"), tools=huge), "tools", "500 tools")
    expect_400(openai, lambda: c(model="script", messages=user("x"), tools=[{"type": "function", "function": {"name": "a b"}}]),
               "tools[0].function.name", "bad tool name")
    expect_400(openai, lambda: c(model="script", messages=user("x"), extra_body={"functions": [{"name": "f"}]}),
               "functions", "legacy functions")
    # The scripted backend has no vocabulary to compile a grammar for: the forced call's schema is
    # refused, naming tool_choice (test_smollm2 generates under it on the real model).
    for choice in ("required", {"type": "function", "function": {"name": "add"}}):
        expect_400(openai, lambda: c(model="script", messages=user("x"), tools=TOOLS, tool_choice=choice),
                   "tool_choice", "tool_choice %r" % (choice,))
    expect_400(openai, lambda: c(model="script", messages=user("x"), tools=TOOLS, tool_choice="required",
                                 response_format={"type": "json_object"}),
               "response_format", "tool_choice required with response_format")


def test_smollm2(openai, mpkv, model):
    srv = mpkv_serve(mpkv, model, ["-c", "1024", "--kv-budget-mib", "16"], api_key=None)
    try:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=300)
        r = client.chat.completions.create(model="smol", messages=user("What is the weather in Paris? Use the tool."),
                                           tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=48)
        c = r.choices[0]
        print("SmolLM2, tools + tool_choice auto: finish_reason=%s tool_calls=%s content=%r" %
              (c.finish_reason, c.message.tool_calls, c.message.content), flush=True)
        check(c.finish_reason in ("stop", "length", "tool_calls"), "SmolLM2 finish_reason %r" % c.finish_reason)
        # Its template has no tool markup: nothing is parsed, the text is the content.
        check(not c.message.tool_calls, "SmolLM2 has no tool-call format, yet calls were parsed")
        # tool_choice required / named: generated under the forced call's schema (tool_schema.h), so
        # the answer is tool calls whose arguments are valid JSON of the tool's parameters.
        names = {t["function"]["name"]: t["function"].get("parameters", {}) for t in TOOLS}
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            r = client.chat.completions.create(model="smol", messages=user("What is the weather in Paris?"),
                                               tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=160)
            c = r.choices[0]
            print("SmolLM2, tool_choice %r: finish_reason=%s tool_calls=%s" % (choice, c.finish_reason, c.message.tool_calls),
                  flush=True)
            check(c.finish_reason == "tool_calls" and c.message.tool_calls, "tool_choice %r gave no calls" % (choice,))
            for call in c.message.tool_calls:
                check(call.type == "function" and call.function.name in names, "unknown tool %r" % call.function.name)
                if isinstance(choice, dict):
                    check(call.function.name == "get_weather", "named tool_choice called %r" % call.function.name)
                args = json.loads(call.function.arguments)
                try:
                    import jsonschema
                    jsonschema.validate(args, names[call.function.name])
                except ImportError:
                    check(isinstance(args, dict), "arguments %r are not an object" % args)
            # Streamed, the call's arguments go out in pieces as the model writes them (the same
            # greedy tokens as above), their concatenation the non-streamed arguments.
            deltas = [tc for ch in client.chat.completions.create(
                          model="smol", messages=user("What is the weather in Paris?"), tools=TOOLS, tool_choice=choice,
                          temperature=0, max_tokens=160, stream=True)
                      if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
            first = [d for d in deltas if d.index == 0]
            check(first and first[0].function.name == c.message.tool_calls[0].function.name and first[0].function.arguments == "",
                  "streamed head %r" % first[:1])
            check("".join(d.function.arguments for d in first) == c.message.tool_calls[0].function.arguments,
                  "streamed arguments %r" % [d.function.arguments for d in first])
            check(len(first) > 2, "arguments in %d pieces" % (len(first) - 1))
            print("SmolLM2, tool_choice %r streamed: %s" % (choice, " ".join(json.dumps(d.model_dump(exclude_none=True)) for d in first)),
                  flush=True)
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script-server", required=True)
    ap.add_argument("--mpkv", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--templates", required=True)
    args = ap.parse_args()
    try:
        import openai
    except ImportError:
        print("SKIP: the openai package is missing (scripts/test.sh installs it)")
        return SKIP
    for name, tests in (("Qwen-Qwen2.5-7B-Instruct.jinja", ("loop", "stream", "parallel", "hostile")), ("Qwen-Qwen3-0.6B.jinja", ("think",))):
        srv = ServerProcess([args.script_server, "--template", os.path.join(args.templates, name)])
        try:
            client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=60)
            if "loop" in tests:
                test_tool_loop(client)
            if "stream" in tests:
                test_streamed_calls(client)
            if "parallel" in tests:
                test_parallel_false(client)
            if "hostile" in tests:
                test_hostile(openai, client)
            if "think" in tests:
                test_thinking(client)
        finally:
            srv.stop()
    model = model_path(args.source)
    if os.path.exists(model):
        test_smollm2(openai, args.mpkv, model)
    else:
        print("SmolLM2 part skipped: %s absent" % model)
    print("PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

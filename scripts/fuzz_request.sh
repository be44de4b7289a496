#!/usr/bin/env bash
# Runs the HTTP API's libFuzzer target (tests/fuzz/server/fuzz_request.cpp: any bytes as the body of any
# route, including /tokenize and /detokenize, must get an answer, never a crash, a sanitizer
# report or a 5xx other than 503) for a fixed time, under ASan + UBSan.
# Usage: scripts/fuzz_request.sh [seconds (default 600)] [build-dir (default build-fuzz)]
# Needs clang with libFuzzer (Debian: clang). The corpus grows in BUILD/fuzz_request_corpus, seeded
# with one request per route and per request field (docs/serving.md lists them); a crash leaves
# its input as BUILD/crash-* and makes this script fail.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-600}
BUILD_DIR=${2:-build-fuzz}
command -v clang++ >/dev/null || { echo "fuzz_request: clang++ is needed (apt-get install clang)"; exit 1; }

CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPKV_FUZZ=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target fuzz_request

CORPUS="$BUILD_DIR/fuzz_request_corpus"
mkdir -p "$CORPUS"
# The first byte picks the route: ' ' chat, '!' completions, '&' /tokenize, "'" /detokenize
# (authorized POSTs; see fuzz_request.cpp).
seed() { printf '%s' "$2" > "$CORPUS/seed_$1"; }
seed chat ' {"messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
seed chat_fields ' {"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}],"max_completion_tokens":3,"temperature":0.7,"top_p":0.9,"top_k":5,"min_p":0.1,"seed":7,"stop":["x","yz"],"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"logit_bias":{"104":-100,"105":3.5},"stop_token_ids":[33],"priority":-3,"ignore_eos":true,"min_tokens":1,"logprobs":true,"top_logprobs":2,"stream":true,"stream_options":{"include_usage":true},"n":1}'
seed chat_schema ' {"messages":[{"role":"user","content":"j"}],"max_tokens":4,"response_format":{"type":"json_schema","json_schema":{"name":"s","strict":true,"schema":{"type":"object","properties":{"a":{"type":"array","items":{"enum":["x",1]},"maxItems":2},"b":{"$ref":"#/$defs/d"}},"required":["a"],"$defs":{"d":{"type":"string","pattern":"^[a-z]+$"}}}}}}'
seed chat_constraints ' {"messages":[{"role":"user","content":"c"}],"max_tokens":3,"structured_outputs":{"choice":["yes","no"]},"n":2}'
seed completions_grammar '!{"prompt":"g","max_tokens":3,"guided_regex":"[0-9]{2}","stream":true}'
seed completions_gbnf '!{"prompt":"g","max_tokens":3,"grammar":"root ::= \"a\" [b-d]*"}'
seed completions '!{"prompt":"hello","max_tokens":4,"echo":true}'
seed completions_ids '!{"prompt":[104,105,33],"max_tokens":3,"logprobs":2}'
seed completions_many '!{"prompt":["ab",[99,100],"ef"],"max_tokens":2,"stream":true,"echo":true,"stop_token_ids":[98]}'
seed completions_batch '!{"prompt":[[1,2],[3]],"max_tokens":2,"best_of":1,"suffix":""}'
seed completions_n '!{"prompt":["ab",[99,100]],"n":3,"best_of":3,"seed":5,"max_tokens":2,"echo":true,"logprobs":1}'
seed chat_n ' {"messages":[{"role":"user","content":"hi"}],"n":2,"stream":true,"max_tokens":2,"logprobs":true}'
seed chat_tools '`{"messages":[{"role":"user","content":"<think>x</think>ok <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1]}}</tool_call>"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"array"}}}}}],"tool_choice":"auto","parallel_tool_calls":false,"stream":true}'
seed chat_tool_history '`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}'
seed chat_reasoning '`{"messages":[{"role":"user","content":"<think>a</thi"}],"reasoning_format":"deepseek","include_reasoning":false,"reasoning_budget_tokens":0,"thinking_budget_tokens":0,"chat_template_kwargs":{"enable_thinking":false}}'
seed tokenize_llama '&{"content":"hello","add_special":true,"with_pieces":true}'
seed tokenize_vllm '&{"prompt":"hello","add_special_tokens":false,"return_token_strs":true}'
seed tokenize_chat '&{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}'
seed detokenize "'"'{"tokens":[104,105]}'

"$BUILD_DIR/fuzz_request" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$BUILD_DIR/" "$CORPUS"

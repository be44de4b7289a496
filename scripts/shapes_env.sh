#!/usr/bin/env bash
# The Python environment of the real-shape GGUF writer (scripts/make_shape_gguf.py, docs/models.md
# "Real shapes"): .venv-shapes/ (git-ignored) with PINNED PyPI packages, so that the same script
# writes the same bytes on every machine. gguf 0.19.0 is the gguf-py version inside the pinned
# llama.cpp tree (scripts/llama_cpp_source.sh). Extra pinned packages may be named on the command
# line. Prints the venv's python on stdout.
# Usage: PY=$(scripts/shapes_env.sh [package==version ...])
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-shapes
PINS=(gguf==0.19.0 numpy==2.2.6)
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" >&2
fi
want=("${PINS[@]}" "$@")
have=$("$VENV/bin/python" -m pip freeze --disable-pip-version-check 2>/dev/null || true)
missing=()
for p in "${want[@]}"; do grep -qixF "$p" <<<"$have" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "shapes_env: installing ${missing[*]} into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${missing[@]}" >&2
fi
echo "$PWD/$VENV/bin/python"

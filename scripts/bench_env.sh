#!/usr/bin/env bash
# The Python environment of the serving benchmark, the serving demo and the replica script:
# .venv-bench/ (git-ignored), made with --system-site-packages so that a llama-cpp-python installed
# for the whole machine (scripts/install_peer.sh) is seen in it. Installs the PyPI packages named on
# the command line (pip leaves those already there alone) and prints the venv's python on stdout.
# Usage: PY=$(scripts/bench_env.sh httpx openai matplotlib)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-bench
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV" >&2
fi
if [ $# -gt 0 ]; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2
fi
echo "$PWD/$VENV/bin/python"

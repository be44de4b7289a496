#!/usr/bin/env bash
# Installs the peer, llama.cpp through llama-cpp-python from PyPI (compiled from source: several
# minutes on 2 cores). Only the peer scripts need it; the build and the tests do not.
set -euo pipefail
# PEER_PYTHON: another interpreter (a venv) to install into, as scripts/make_golden.sh takes it.
PY=${PEER_PYTHON:-$(command -v python3 || command -v python)}
if "$PY" -c "import llama_cpp, numpy" 2>/dev/null; then exit 0; fi
"$PY" -m pip install --quiet --disable-pip-version-check numpy llama-cpp-python

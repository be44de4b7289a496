#!/usr/bin/env bash
# Builds everything with AddressSanitizer + UBSan (-DMPKV_SANITIZE=ON: leak checking on, any UB
# report fatal) into build-sanitize and runs the whole test suite there, so "the sanitizer build
# stays clean" is checked, not assumed. Debug-level optimisation keeps reports readable.
# Usage: scripts/sanitize.sh [build-dir] [ctest args...]   (default build-sanitize; e.g. -R test_cli)
# Set JOBS (default: nproc) to share the cores; prefix with `nice` on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-sanitize}
shift || true
JOBS=${JOBS:-$(nproc)}
# Needs the Debian packages scripts/setup.sh installs (run it once first).
scripts/get_model.sh || echo "sanitize: default model unavailable; tests that need it skip"
scripts/get_model.sh gemma3-270m || echo "sanitize: Gemma 3 270M unavailable; tests that need it skip"
scripts/get_jinja.sh   # CMake needs the Jinja engine (docs/chat_templates.md)
scripts/get_xgrammar.sh  # and xgrammar (docs/structured_outputs.md)
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPKV_SANITIZE=ON
cmake --build "$BUILD_DIR" -j "$JOBS"
cd "$BUILD_DIR"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# detect_leaks: LeakSanitizer on (the default on x86-64 Linux, stated so nobody turns it off by accident).
# halt_on_error / -fno-sanitize-recover: the first report fails the test that caused it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --output-on-failure -j "$JOBS" --timeout 3600 "$@"

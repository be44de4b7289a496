#!/usr/bin/env bash
# The one run on a GPU machine for the CUDA kernels (docs/cuda.md, "Device run"): the device tests, the CPU
# tests of the shared math and host emulation, the CUDA microbenchmark and the CPU kernel tests
# (AVX-512 where the CPU has it), everything left under $OUT for docs/results/cuda.md. Made to run
# once, unattended, inside the device tool's 600 s: every step is announced, logged and bounded by
# its own cap and by what is left of BUDGET_S (default 560 s), so summary.txt is written even when
# steps run long; a failing step does not stop the later ones; the exit status is non-zero if
# anything failed.
#
# The lent machine may lack the project's libraries (GTest, PCRE2, OpenBLAS, cpp-httplib,
# nlohmann_json: nothing can be installed there), so the binaries can be built here and carried:
#   here:    scripts/device_check.sh --stage build-prebuilt [build]   (builds the targets below in
#            [build], default build, and copies them and libgomp into build-prebuilt/, git-ignored)
#   device:  OUT=$OUT BIN=build-prebuilt scripts/device_check.sh      (carry: ["build-prebuilt"])
# Without BIN it configures and builds on the machine instead (folder build-device, -j$(nproc)).
#
# Usage: OUT=<dir> [BIN=<dir>] [BUDGET_S=<s>] scripts/device_check.sh [build-dir]
# Output ($OUT, at most 8 files: the device tool brings back no more): log.txt (everything),
#   env.txt, build.log, test_cuda_device.txt, cuda_cpu_tests.txt (the three CPU tests of the CUDA
#   code), bench.md (the microbenchmark's tables), cpu_kernels.txt (CPU kernel tests, and in a
#   build here ctest -R Avx512), summary.txt.
# Duration on 16 cores and an H200: not measured yet (expected a few minutes: the build is a handful
# of libraries and tests, the bench about 200 configurations). The bench prints row by row, so a
# run stopped early keeps what it measured.
set -euo pipefail
cd "$(dirname "$0")/.."

CUDA_TARGETS=(test_cuda_device bench_cuda_decode test_cuda_math test_cuda_pages test_cuda_decode_host)
# CPU_TESTS (space-separated) replaces the list, for a dry run of this script on a small machine.
DEFAULT_CPU_TESTS="test_quant_kernels test_quant_shift test_quant_layout test_util_fp16 test_attention_f16
  test_kvcache_attention_kernels test_kvcache_attention_q8 test_kvcache_shrunk_attention
  test_kvcache_paged_attention test_matvec_kernels test_matvec_driver"
# shellcheck disable=SC2206  # names without spaces or globs: word splitting is the point
CPU_KERNEL_TESTS=(${CPU_TESTS:-$DEFAULT_CPU_TESTS})

if [ "${1:-}" = "--stage" ]; then
  dest=${2:?usage: scripts/device_check.sh --stage DIR [build-dir]}
  build=${3:-build}
  cmake --build "$build" -j "${JOBS:-2}" --target "${CUDA_TARGETS[@]}" "${CPU_KERNEL_TESTS[@]}"
  mkdir -p "$dest"
  for t in "${CUDA_TARGETS[@]}" "${CPU_KERNEL_TESTS[@]}"; do cp "$build/$t" "$dest/"; done
  cp -L "$(g++ -print-file-name=libgomp.so.1)" "$dest/"  # in case the machine has no libgomp
  git describe --always --dirty > "$dest/STAGED_AT" 2>/dev/null || echo "no git" > "$dest/STAGED_AT"
  du -sh "$dest"
  exit 0
fi

OUT=${OUT:-out/device_check}
BUILD=${1:-build-device}
BUDGET_S=${BUDGET_S:-560}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
JOBS=$(nproc)
export OMP_WAIT_POLICY=passive
failed=()
step() { echo; echo "== $(date -u +%H:%M:%S) (+${SECONDS}s) $*"; }
# cap SECONDS: the smaller of SECONDS and what is left of the budget (at least 2: past the budget
# each later step still gets a moment, so the summary is written well inside the tool's 600 s).
cap() {
  local left=$((BUDGET_S - SECONDS))
  ((left < $1)) || left=$1
  ((left >= 2)) || left=2
  echo "$left"
}
# check NAME FILE SECONDS CMD...: runs CMD bounded by cap SECONDS, its output appended to $OUT/FILE
# and the log; records a failure instead of stopping.
check() {
  local name=$1 file=$2 secs
  secs=$(cap "$3")
  shift 3
  step "$name (at most ${secs}s): $*"
  echo "== $name: $*" >> "$OUT/$file"
  if timeout --kill-after=10 "$secs" "$@" >> "$OUT/$file" 2>&1; then
    echo "   ok ($name)"
  else
    echo "   FAILED ($name, status $?; last lines follow)"
    failed+=("$name")
  fi
  tail -n 25 "$OUT/$file"
}

step "environment"
{
  date -u
  git describe --always --dirty 2>/dev/null || echo "no git"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 | tail -2 || echo "nvcc: not on PATH"
  g++ --version | head -1 || true
  cmake --version | head -1 || true
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket)' || true
  echo "AVX-512 flags: $(grep -o 'avx512[a-z]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ -n "${BIN:-}" ]; then
  step "binaries from $BIN (staged at $(cat "$BIN/STAGED_AT" 2>/dev/null || echo '?'))"
  for t in "${CUDA_TARGETS[@]}" "${CPU_KERNEL_TESTS[@]}"; do
    [ -x "$BIN/$t" ] || { echo "device_check: $BIN/$t missing (scripts/device_check.sh --stage $BIN)"; exit 1; }
  done
  BUILD=$BIN
  bin_abs=$(cd "$BIN" && pwd)
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$bin_abs"  # libgomp if the machine has none
  echo "prebuilt: no build here" > "$OUT/build.log"
else
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
  command -v nvcc >/dev/null || { echo "device_check: no nvcc (not on PATH, not in /usr/local/cuda/bin)"; exit 1; }
  step "configure ($BUILD, Release, MPKV_CUDA=ON)"
  timeout "$(cap 120)" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPKV_CUDA=ON > "$OUT/build.log" 2>&1 ||
    { tail -n 40 "$OUT/build.log"; echo "device_check: configure failed (missing libraries? use BIN, see the header)"; exit 1; }
  step "build ${CUDA_TARGETS[*]} ${CPU_KERNEL_TESTS[*]} (-j$JOBS)"
  timeout "$(cap 300)" cmake --build "$BUILD" -j "$JOBS" --target "${CUDA_TARGETS[@]}" "${CPU_KERNEL_TESTS[@]}" >> "$OUT/build.log" 2>&1 ||
    { grep -E 'error|Error' "$OUT/build.log" | head -40; echo "device_check: build failed"; exit 1; }
  echo "   built in $BUILD"
fi

# The device tests first: everything else is worth little if they fail (still run to get the figures).
check test_cuda_device test_cuda_device.txt 180 "$BUILD/test_cuda_device"
grep -q "SKIPPED" "$OUT/test_cuda_device.txt" && { echo "   device tests SKIPPED: no usable GPU"; failed+=(no_gpu); }
for t in test_cuda_math test_cuda_pages test_cuda_decode_host; do check "$t" cuda_cpu_tests.txt 60 "$BUILD/$t"; done

# CPU kernel tests in the background while the GPU benchmark runs (they need no GPU); each bounded
# by what is left of the budget, so the wait below ends in time.
step "CPU kernel tests in the background (default ISA: the best this CPU has)"
(
  rc=0
  for t in "${CPU_KERNEL_TESTS[@]}"; do
    echo "-- $t"
    timeout --kill-after=5 "$(cap 120)" "$BUILD/$t" --gtest_brief=1 || { echo "FAILED: $t"; rc=1; }
  done
  if [ -z "${BIN:-}" ]; then
    echo "-- ctest -R Avx512"
    (cd "$BUILD" && timeout "$(cap 120)" ctest --output-on-failure -j "$JOBS" -R 'Avx512|avx512') || rc=1
  fi
  exit $rc
) > "$OUT/cpu_kernels.txt" 2>&1 &
cpu_pid=$!

check bench bench.md 300 "$BUILD/bench_cuda_decode"

step "waiting for the CPU kernel tests"
if wait "$cpu_pid"; then echo "   ok (cpu_kernels)"; else echo "   FAILED (cpu_kernels)"; failed+=(cpu_kernels); fi
grep -E "FAILED|PASSED|tests passed|Failed" "$OUT/cpu_kernels.txt" | tail -n 30 || true

step "summary"
{
  echo "device_check at $(git describe --always --dirty 2>/dev/null || echo '?'), $(date -u), ${SECONDS}s"
  if [ ${#failed[@]} -eq 0 ]; then echo "all steps passed"; else echo "failed: ${failed[*]}"; fi
} | tee "$OUT/summary.txt"
[ ${#failed[@]} -eq 0 ]

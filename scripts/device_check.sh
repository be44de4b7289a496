#!/usr/bin/env bash
# The one run on a GPU machine for issue 14 (docs/cuda.md, "Device run"): configure and build the
# CUDA code and the AVX-512 CPU kernels, run the device tests, the CUDA microbenchmark and the CPU
# kernel tests (AVX-512 where the CPU has it), and leave everything under $OUT for
# docs/results/cuda.md. Made to run once, unattended: every step is announced, bounded by a
# timeout and logged; a failing test step does not stop the later steps, and the exit status is
# non-zero if anything failed.
#
# Usage: OUT=<dir> scripts/device_check.sh [build-dir]     (defaults: OUT=out/device_check, build-device)
# Output ($OUT): log.txt (everything), env.txt, build.log, test_cuda_device.txt, test_cuda_math.txt,
#   test_cuda_pages.txt, test_cuda_decode_host.txt, bench.md (the microbenchmark's tables),
#   cpu_kernels.txt, ctest_avx512.txt, summary.txt.
# Duration on 16 cores and an H200: not measured yet (expected a few minutes: the build is a handful
# of libraries and tests, the bench about 200 configurations). The bench is bounded at 300 s and
# prints row by row, so a run stopped early keeps what it measured.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/device_check}
BUILD=${1:-build-device}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
JOBS=$(nproc)
export OMP_WAIT_POLICY=passive
failed=()
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }
# check NAME SECONDS CMD...: runs CMD with a timeout, its output to $OUT/NAME.txt and the log;
# records a failure instead of stopping.
check() {
  local name=$1 secs=$2
  shift 2
  step "$name: $*"
  if timeout --kill-after=10 "$secs" "$@" > "$OUT/$name.txt" 2>&1; then
    echo "   ok ($name)"
  else
    echo "   FAILED ($name, status $?; last lines follow)"
    failed+=("$name")
  fi
  tail -n 25 "$OUT/$name.txt"
}

step "environment"
{
  date -u
  git describe --always --dirty 2>/dev/null || echo "no git"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 | tail -2 || echo "nvcc: not on PATH"
  g++ --version | head -1
  cmake --version | head -1
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket)' || true
  echo "AVX-512 flags: $(grep -o 'avx512[a-z]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
command -v nvcc >/dev/null || { echo "device_check: no nvcc (not on PATH, not in /usr/local/cuda/bin)"; exit 1; }

CUDA_TARGETS=(test_cuda_device bench_cuda_decode test_cuda_math test_cuda_pages test_cuda_decode_host)
# CPU_TESTS (space-separated) replaces the list, for a dry run of this script on a small machine.
DEFAULT_CPU_TESTS="test_quant_kernels test_quant_shift test_quant_layout test_util_fp16 test_attention_f16
  test_kvcache_attention_kernels test_kvcache_attention_q8 test_kvcache_shrunk_attention
  test_kvcache_paged_attention test_matvec_kernels test_matvec_driver"
# shellcheck disable=SC2206  # names without spaces or globs: word splitting is the point
CPU_KERNEL_TESTS=(${CPU_TESTS:-$DEFAULT_CPU_TESTS})

step "configure ($BUILD, Release, MPKV_CUDA=ON)"
timeout 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMPKV_CUDA=ON > "$OUT/build.log" 2>&1 ||
  { tail -n 40 "$OUT/build.log"; echo "device_check: configure failed"; exit 1; }
step "build ${CUDA_TARGETS[*]} ${CPU_KERNEL_TESTS[*]} (-j$JOBS)"
timeout 360 cmake --build "$BUILD" -j "$JOBS" --target "${CUDA_TARGETS[@]}" "${CPU_KERNEL_TESTS[@]}" >> "$OUT/build.log" 2>&1 ||
  { grep -E 'error|Error' "$OUT/build.log" | head -40; echo "device_check: build failed"; exit 1; }
echo "   built in $BUILD"

# The device tests first: everything else is worth little if they fail (still run to get the figures).
check test_cuda_device 300 "$BUILD/test_cuda_device"
grep -q "SKIPPED" "$OUT/test_cuda_device.txt" && { echo "   device tests SKIPPED: no usable GPU"; failed+=(no_gpu); }
check test_cuda_math 120 "$BUILD/test_cuda_math"
check test_cuda_pages 120 "$BUILD/test_cuda_pages"
check test_cuda_decode_host 120 "$BUILD/test_cuda_decode_host"

# CPU kernel tests in the background while the GPU benchmark runs (they need no GPU).
step "CPU kernel tests in the background (default ISA: the best this CPU has)"
(
  rc=0
  for t in "${CPU_KERNEL_TESTS[@]}"; do
    echo "-- $t"
    timeout 300 "$BUILD/$t" --gtest_brief=1 || { echo "FAILED: $t"; rc=1; }
  done
  (cd "$BUILD" && timeout 300 ctest --output-on-failure -j "$JOBS" -R 'Avx512|avx512') > "$OUT/ctest_avx512.txt" 2>&1 || rc=1
  exit $rc
) > "$OUT/cpu_kernels.txt" 2>&1 &
cpu_pid=$!

check bench 300 "$BUILD/bench_cuda_decode"
cp "$OUT/bench.txt" "$OUT/bench.md"

step "waiting for the CPU kernel tests"
if wait "$cpu_pid"; then echo "   ok (cpu_kernels)"; else echo "   FAILED (cpu_kernels)"; failed+=(cpu_kernels); fi
grep -E "FAILED|PASSED|tests passed|Failed" "$OUT/cpu_kernels.txt" "$OUT/ctest_avx512.txt" | tail -n 30 || true

step "summary"
{
  echo "device_check at $(git describe --always --dirty 2>/dev/null || echo '?'), $(date -u)"
  if [ ${#failed[@]} -eq 0 ]; then echo "all steps passed"; else echo "failed: ${failed[*]}"; fi
} | tee "$OUT/summary.txt"
[ ${#failed[@]} -eq 0 ]

// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*() (GCC bug
// 105593); the probes read no uninitialized value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "matvec/machine_limits.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>

#include "matvec/matvec_kernels.h"
#include "util/cpu_features.h"

namespace mpkv {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// ---- int8 multiply-add loops: kProbeAcc independent accumulators, so throughput, not latency,
// bounds the loop; the empty asm keeps the operands opaque to the compiler. (Lambdas would not
// inherit the target attribute, so each loop is a function of its own.)
constexpr int kProbeAcc = 12;
constexpr int64_t kProbeIters = 4000000;

double probe_rate(double macs_per_iter, void (*loop)()) {
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = thread_cpu_seconds();
    loop();
    rates.push_back(macs_per_iter * (double)kProbeIters / (thread_cpu_seconds() - t0));
  }
  return median(rates);
}

__attribute__((target("avx2"))) void loop_maddubs256() {
  __m256i acc[kProbeAcc];
  for (auto& a : acc) a = _mm256_setzero_si256();
  __m256i u = _mm256_set1_epi8(3), v = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < kProbeIters; ++i) {
    __asm__ volatile("" : "+x"(u), "+x"(v));
    for (auto& a : acc) a = _mm256_add_epi16(a, _mm256_maddubs_epi16(u, v));
  }
  __m256i t = acc[0];
  for (int k = 1; k < kProbeAcc; ++k) t = _mm256_xor_si256(t, acc[k]);
  __asm__ volatile("" : : "x"(t));
}

__attribute__((target("avx512f,avx512vl,avx512vnni"))) void loop_vnni256() {
  __m256i acc[kProbeAcc];
  for (auto& a : acc) a = _mm256_setzero_si256();
  __m256i u = _mm256_set1_epi8(3), v = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < kProbeIters; ++i) {
    __asm__ volatile("" : "+v"(u), "+v"(v));
    for (auto& a : acc) a = _mm256_dpbusd_epi32(a, u, v);
  }
  __m256i t = acc[0];
  for (int k = 1; k < kProbeAcc; ++k) t = _mm256_xor_si256(t, acc[k]);
  __asm__ volatile("" : : "v"(t));
}

__attribute__((target("avx512f,avx512vnni"))) void loop_vnni512() {
  __m512i acc[kProbeAcc];
  for (auto& a : acc) a = _mm512_setzero_si512();
  __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < kProbeIters; ++i) {
    __asm__ volatile("" : "+v"(u), "+v"(v));
    for (auto& a : acc) a = _mm512_dpbusd_epi32(a, u, v);
  }
  __m512i t = acc[0];
  for (int k = 1; k < kProbeAcc; ++k) t = _mm512_xor_si512(t, acc[k]);
  __asm__ volatile("" : : "v"(t));
}

}  // namespace

double read_bandwidth_gbs(int threads, size_t bytes, int reps) {
  std::vector<uint64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  std::vector<double> times;
  volatile uint64_t sink = 0;
  const int64_t n = (int64_t)buf.size() / 4 * 4;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < n; i += 4) total += buf[i] + buf[i + 1] + buf[i + 2] + buf[i + 3];
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sink = sink + total;
  }
  return (double)n * 8 / median(times) / 1e9;
}

std::vector<Int8PeakProbe> int8_peak_probes() {
  std::vector<Int8PeakProbe> p;
  if ((int)best_isa() >= (int)Isa::avx2) p.push_back({"vpmaddubsw ymm", probe_rate(kProbeAcc * 32.0, loop_maddubs256)});
  if ((int)best_isa() >= (int)Isa::avx512 && cpu_has_avx512_vnni()) {
    p.push_back({"vpdpbusd ymm", probe_rate(kProbeAcc * 32.0, loop_vnni256)});
    p.push_back({"vpdpbusd zmm", probe_rate(kProbeAcc * 64.0, loop_vnni512)});
  }
  std::sort(p.begin(), p.end(), [](const Int8PeakProbe& a, const Int8PeakProbe& b) { return a.macs_per_s > b.macs_per_s; });
  return p;
}

}  // namespace mpkv

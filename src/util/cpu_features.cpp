#include "util/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstdio>

#include "util/error.h"

namespace mpkv {

namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((uint64_t)edx << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & bit_OSXSAVE;
  const bool avx = c & bit_AVX;
  f.fma = c & bit_FMA;
  f.f16c = c & bit_F16C;
  if (!osxsave || !avx) return CpuFeatures{};
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_ok && (b & bit_AVX2);
  f.avx512f = zmm_ok && (b & bit_AVX512F);
  f.avx512bw = zmm_ok && (b & bit_AVX512BW);
  f.avx512vl = zmm_ok && (b & bit_AVX512VL);
  f.avx512dq = zmm_ok && (b & bit_AVX512DQ);
  f.avx512vnni = zmm_ok && (c & bit_AVX512VNNI);
  if (!ymm_ok) f.fma = f.f16c = false;
  return f;
}

Isa decide_active() {
  const Isa best = best_isa();
  const char* env = std::getenv("MPKV_ISA");
  if (!env || !*env) return best;
  const Isa want = parse_isa(env);
  if ((int)want > (int)best) {
    throw Error(std::string("MPKV_ISA=") + env + " asks for more than this CPU supports (best: " +
                isa_name(best) + ")");
  }
  return want;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa best_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) return Isa::avx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::avx2;
  return Isa::scalar;
}

Isa active_isa() {
  static const Isa isa = decide_active();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

Isa parse_isa(const std::string& s) {
  if (s == "scalar") return Isa::scalar;
  if (s == "avx2") return Isa::avx2;
  if (s == "avx512") return Isa::avx512;
  throw Error("unknown ISA '" + s + "' (expected scalar, avx2 or avx512)");
}

}  // namespace mpkv

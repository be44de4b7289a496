// CPU feature detection and the one ISA choice for the whole process.
//
// Every kernel family (matvec, quantizers, attention) keeps a table of function pointers with a
// scalar _ref entry and AVX2 / AVX-512 entries; each table picks its entries from active_isa(),
// which is decided once from cpuid. MPKV_ISA=scalar|avx2|avx512 in the environment forces the
// choice *down* (asking for more than the CPU has is an error), so the tests can run every
// variant on one machine.
#pragma once
#include <string>

namespace mpkv {

enum class Isa { scalar = 0, avx2 = 1, avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  // AVX-512 VNNI (vpdpbusd): not a tier of its own; kernel families with VNNI variants use them
  // inside the avx512 tier when this is set.
  bool avx512vnni = false;
};

const CpuFeatures& cpu_features();
// The best ISA this CPU supports (independent of MPKV_ISA).
Isa best_isa();
// The ISA kernels use: best_isa() unless MPKV_ISA asks for a lower one. Decided once.
Isa active_isa();
const char* isa_name(Isa isa);
// Parses "scalar" | "avx2" | "avx512"; throws Error otherwise.
Isa parse_isa(const std::string& s);

}  // namespace mpkv

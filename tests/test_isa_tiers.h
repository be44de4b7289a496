// The ISA tiers a kernel test loops over (each family's table per tier; MPKV_ISA-independent).
#pragma once
#include <vector>

#include "util/cpu_features.h"

namespace mpkv::test {

// Every tier this CPU runs, scalar first.
inline std::vector<Isa> runnable_isas() {
  std::vector<Isa> v{Isa::scalar};
  if (best_isa() >= Isa::avx2) v.push_back(Isa::avx2);
  if (best_isa() >= Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

}  // namespace mpkv::test

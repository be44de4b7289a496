#include "model/activation_kernels.h"

#include <string>

#include "util/error.h"

namespace mpkv {

namespace {
constexpr ActivationKernels kRef{Isa::scalar, silu_mul_ref};
constexpr ActivationKernels kAvx2{Isa::avx2, silu_mul_avx2};
// The AVX-512 tier runs the 8-lane kernel: the gate is ~1% of a decode step, not worth a second copy.
constexpr ActivationKernels kAvx512{Isa::avx512, silu_mul_avx2};
}  // namespace

const ActivationKernels& activation_kernels_for(Isa isa) {
  MPKV_CHECK(isa <= best_isa(), std::string("activation: this CPU cannot run the ") + isa_name(isa) + " kernels");
  switch (isa) {
    case Isa::avx512: return kAvx512;
    case Isa::avx2: return kAvx2;
    case Isa::scalar: break;
  }
  return kRef;
}

const ActivationKernels& activation_kernels() {
  static const ActivationKernels& k = activation_kernels_for(active_isa());
  return k;
}

}  // namespace mpkv

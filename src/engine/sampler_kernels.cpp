#include "engine/sampler_kernels.h"

#include <string>

#include "util/error.h"

namespace mpkv {

namespace {
constexpr SamplerKernels kRef{Isa::scalar, sampler_argmax_ref, sampler_max_ref, sampler_exp_weights_ref,
                              sampler_select_range_ref};
constexpr SamplerKernels kAvx2{Isa::avx2, sampler_argmax_avx2, sampler_max_avx2, sampler_exp_weights_avx2,
                               sampler_select_range_avx2};
constexpr SamplerKernels kAvx512{Isa::avx512, sampler_argmax_avx512, sampler_max_avx512, sampler_exp_weights_avx512,
                                 sampler_select_range_avx512};
}  // namespace

const SamplerKernels& sampler_kernels_for(Isa isa) {
  MPKV_CHECK(isa <= best_isa(), std::string("sampler: this CPU cannot run the ") + isa_name(isa) + " kernels");
  switch (isa) {
    case Isa::avx512: return kAvx512;
    case Isa::avx2: return kAvx2;
    case Isa::scalar: break;
  }
  return kRef;
}

const SamplerKernels& sampler_kernels() {
  static const SamplerKernels& k = sampler_kernels_for(active_isa());
  return k;
}

}  // namespace mpkv

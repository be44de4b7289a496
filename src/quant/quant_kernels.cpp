// The one place the quant kernel table is chosen (from active_isa(), once).
#include "quant/quant_kernels.h"

#include <string>

#include "util/error.h"

namespace mpkv {

namespace {
const QuantKernels kRef{Isa::scalar, quantize_ref, dequantize_ref, shrink_ref, dot_ref, accumulate_ref};
const QuantKernels kAvx2{Isa::avx2, quantize_avx2, dequantize_avx2, shrink_avx2, dot_avx2, accumulate_avx2};
const QuantKernels kAvx512{Isa::avx512, quantize_avx512, dequantize_avx512, shrink_avx512, dot_avx512,
                           accumulate_avx512};
}  // namespace

const QuantKernels& quant_kernels_for(Isa isa) {
  MPKV_CHECK((int)isa <= (int)best_isa(), std::string("quant kernels: this CPU cannot run the ") + isa_name(isa) +
                                              " variant (best: " + isa_name(best_isa()) + ")");
  switch (isa) {
    case Isa::avx512: return kAvx512;
    case Isa::avx2: return kAvx2;
    case Isa::scalar: break;
  }
  return kRef;
}

const QuantKernels& quant_kernels() {
  static const QuantKernels& k = quant_kernels_for(active_isa());
  return k;
}

}  // namespace mpkv

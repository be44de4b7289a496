// The one place that picks a kernel table: active_isa() decides once, for the whole process.
// This file is compiled without ISA flags; the tables themselves are constant-initialized data in
// matvec_ref.cpp / matvec_avx2.cpp / matvec_avx512.cpp, so nothing from those files runs before
// a kernel is called.
#include "matvec/matvec_kernels.h"

namespace mpkv {

extern const MatvecKernels kMatvecKernelsRef;
extern const MatvecKernels kMatvecKernelsAvx2;
extern const MatvecKernels kMatvecKernelsAvx512;

QuantDotFn MatvecKernels::quant_dot(GgmlType type) const {
  switch (type) {
    case GgmlType::Q4_0: return dot_q4_0;
    case GgmlType::Q4_1: return dot_q4_1;
    case GgmlType::Q5_0: return dot_q5_0;
    case GgmlType::Q5_1: return dot_q5_1;
    case GgmlType::Q8_0: return dot_q8_0;
    case GgmlType::Q4_K: return dot_q4_k;
    case GgmlType::Q5_K: return dot_q5_k;
    case GgmlType::Q6_K: return dot_q6_k;
    default: return nullptr;
  }
}

QuantTileFn MatvecKernels::quant_tile(GgmlType type) const {
  switch (type) {
    case GgmlType::Q4_0: return tile_q4_0;
    case GgmlType::Q4_1: return tile_q4_1;
    case GgmlType::Q5_0: return tile_q5_0;
    case GgmlType::Q5_1: return tile_q5_1;
    case GgmlType::Q8_0: return tile_q8_0;
    case GgmlType::Q4_K: return tile_q4_k;
    case GgmlType::Q5_K: return tile_q5_k;
    case GgmlType::Q6_K: return tile_q6_k;
    default: return nullptr;
  }
}

FloatDotFn MatvecKernels::float_dot(GgmlType type) const {
  switch (type) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_f16;
    default: return nullptr;
  }
}

const MatvecKernels& matvec_kernels_ref() { return kMatvecKernelsRef; }
const MatvecKernels& matvec_kernels_avx2() { return kMatvecKernelsAvx2; }
const MatvecKernels& matvec_kernels_avx512() { return kMatvecKernelsAvx512; }

const MatvecKernels& matvec_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::avx512: return kMatvecKernelsAvx512;
    case Isa::avx2: return kMatvecKernelsAvx2;
    case Isa::scalar: break;
  }
  return kMatvecKernelsRef;
}

const MatvecKernels& active_matvec_kernels() {
  static const MatvecKernels& k = matvec_kernels_for(active_isa());
  return k;
}

}  // namespace mpkv

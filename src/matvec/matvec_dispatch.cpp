// The one place that picks a kernel table: active_isa() decides once, for the whole process.
// This file is compiled without ISA flags; the tables themselves are constant-initialized data in
// matvec_ref.cpp / matvec_avx2.cpp / matvec_avx512.cpp, so nothing from those files runs before
// a kernel is called (the AVX-512 VNNI table is a copy of the AVX-512 one with the VNNI packed
// kernels of matvec_avx512vnni.cpp, built on first use).
#include "matvec/matvec_kernels.h"

namespace mpkv {

extern const MatvecKernels kMatvecKernelsRef;
extern const MatvecKernels kMatvecKernelsAvx2;
extern const MatvecKernels kMatvecKernelsAvx512;
extern const PackedTileFn kPackedQ4_1Vnni, kPackedQ8_0Vnni, kPackedQ4_KVnni, kPackedQ6_KVnni, kPackedQ5_0Vnni;

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

PackedTileFn MatvecKernels::packed_tile(GgmlType type) const {
  switch (type) {
    case GgmlType::Q4_1: return packed_q4_1;
    case GgmlType::Q8_0: return packed_q8_0;
    case GgmlType::Q4_K: return packed_q4_k;
    case GgmlType::Q6_K: return packed_q6_k;
    case GgmlType::Q5_0: return packed_q5_0;
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

bool cpu_has_avx512_vnni() {
  static const bool has = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
  return has;
}

const MatvecKernels& matvec_kernels_avx512_vnni() {
  static const MatvecKernels k = [] {
    MatvecKernels t = kMatvecKernelsAvx512;
    t.name = "avx512vnni";
    t.packed_q4_1 = kPackedQ4_1Vnni;
    t.packed_q8_0 = kPackedQ8_0Vnni;
    t.packed_q4_k = kPackedQ4_KVnni;
    t.packed_q6_k = kPackedQ6_KVnni;
    t.packed_q5_0 = kPackedQ5_0Vnni;
    return t;
  }();
  return k;
}

const MatvecKernels& matvec_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::avx512: return cpu_has_avx512_vnni() ? matvec_kernels_avx512_vnni() : kMatvecKernelsAvx512;
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

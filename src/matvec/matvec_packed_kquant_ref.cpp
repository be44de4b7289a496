// Scalar reference kernels of the packed K-quant layouts (matvec_packed_kquant.h): per (row,
// activation row) pair the layout's fixed chain of fmas over the pieces in order; the SIMD tiers
// (matvec_packed_kquant_x86.h) are tested bit for bit against these.
#include <cmath>
#include <cstring>

#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed_kquant.h"
#include "util/fp16.h"

namespace mpkv {

namespace {

template <class T>
T load_at(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Row r's code j of a packed Q4_K piece (the Q4_1 nibble order of matvec_packed_kquant.h).
int q4_k_packed_code(const uint8_t* blk, int r, int j) {
  const uint8_t byte = blk[kPackedChunkBytes * ((j % 16) / 4) + 4 * r + j % 4];
  return j < 16 ? byte & 0x0f : byte >> 4;
}

}  // namespace

void packed_q4_k_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  for (int v = 0; v < nv; ++v) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + (size_t)b * kPackedQ4_KBlockBytes;
        const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
        int isum = 0;
        for (int j = 0; j < 32; ++j) isum += q4_k_packed_code(blk, r, j) * a.qs[j];
        const float d = load_at<float>(blk + kPackedQ4_KScaleAt + 4 * r);
        const float m = load_at<float>(blk + kPackedQ4_KMinAt + 4 * r);
        acc = std::fma(d * a.d, (float)isum, acc);
        acc = std::fma(m, a.s, acc);
      }
      out[(size_t)v * kPackRows + r] = acc;
    }
  }
}

void packed_q6_k_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  for (int v = 0; v < nv; ++v) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + (size_t)b * kPackedQ6_KBlockBytes;
        const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
        int isum = 0;
        for (int half = 0; half < 2; ++half) {
          int part = 0;
          for (int j = 16 * half; j < 16 * half + 16; ++j)
            part += (int8_t)blk[kPackedChunkBytes * (j / 4) + 4 * r + j % 4] * a.qs[j];
          isum += load_at<int16_t>(blk + kPackedQ6_KSubScaleAt + kPackedQ6_KSubScaleBytes * half + 4 * r) * part;
        }
        const float d = fp16_to_fp32(load_at<uint16_t>(blk + kPackedQ6_KScaleAt + 2 * r));
        acc = std::fma(d * a.d, (float)isum, acc);
      }
      out[(size_t)v * kPackRows + r] = acc;
    }
  }
}

}  // namespace mpkv

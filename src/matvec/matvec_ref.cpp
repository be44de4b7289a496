// Scalar reference kernels: the specification the AVX2 / AVX-512 variants are tested against.
// Per weight block the integer sum is exact; the block result is (dw*dx)*isum plus the offset term
// (m*s, or -8*dw*s / -16*dw*s), accumulated in fp32 in block order. K-quants: the same per
// 32-element piece of a super-block, sub-block scales folded into isum (matvec_kernels.h).
#include <cmath>
#include <cstring>

#include "gguf/kquant_scales.h"
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed_kquant.h"
#include "matvec/matvec_packed_q5_0.h"
#include "util/fp16.h"

namespace mpkv {

namespace {

void quantize_act_ref(const float* x, BlockQ8Act* out, int64_t n) {
  const int64_t nb = n / kActBlock;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kActBlock;
    float amax = 0.0f;
    for (int j = 0; j < kActBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kActBlock; ++j) {
      // nearbyint in the default rounding mode = round half to even, as _mm256_round_ps does.
      const int q = (int)std::nearbyint(xb[j] * id);
      out[b].qs[j] = (int8_t)q;
      sum += q;
    }
    out[b].d = d;
    out[b].s = d * (float)sum;
  }
}

// Q4_0: w = dw * (q - 8); qs[j] low nibble = weight j, high nibble = weight j + 16.
float dot_q4_0_ref(const void* row, const BlockQ8Act* xq, int64_t n) {
  const BlockQ4_0* w = static_cast<const BlockQ4_0*>(row);
  float acc = 0.0f, offs = 0.0f;
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (w[b].qs[j] & 0x0f) * xq[b].qs[j];
      isum += (w[b].qs[j] >> 4) * xq[b].qs[j + 16];
    }
    const float dw = fp16_to_fp32(w[b].d);
    acc += (dw * xq[b].d) * (float)isum;
    offs += dw * xq[b].s;
  }
  return acc - 8.0f * offs;
}

// Q4_1: w = dw * q + m.
float dot_q4_1_ref(const void* row, const BlockQ8Act* xq, int64_t n) {
  const BlockQ4_1* w = static_cast<const BlockQ4_1*>(row);
  float acc = 0.0f, offs = 0.0f;
  for (int64_t b = 0; b < n / QK4_1; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (w[b].qs[j] & 0x0f) * xq[b].qs[j];
      isum += (w[b].qs[j] >> 4) * xq[b].qs[j + 16];
    }
    acc += (fp16_to_fp32(w[b].d) * xq[b].d) * (float)isum;
    offs += fp16_to_fp32(w[b].m) * xq[b].s;
  }
  return acc + offs;
}

// 5-bit code j of a Q5 block: nibble as in Q4, bit 4 from bit j of the little-endian u32 qh.
inline int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int nib = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
  return nib | (int)(((qh >> j) & 1u) << 4);
}

// Q5_0: w = dw * (q - 16).
float dot_q5_0_ref(const void* row, const BlockQ8Act* xq, int64_t n) {
  const BlockQ5_0* w = static_cast<const BlockQ5_0*>(row);
  float acc = 0.0f, offs = 0.0f;
  for (int64_t b = 0; b < n / QK5_0; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += q5_code(w[b].qs, qh, j) * xq[b].qs[j];
    const float dw = fp16_to_fp32(w[b].d);
    acc += (dw * xq[b].d) * (float)isum;
    offs += dw * xq[b].s;
  }
  return acc - 16.0f * offs;
}

// Q5_1: w = dw * q + m.
float dot_q5_1_ref(const void* row, const BlockQ8Act* xq, int64_t n) {
  const BlockQ5_1* w = static_cast<const BlockQ5_1*>(row);
  float acc = 0.0f, offs = 0.0f;
  for (int64_t b = 0; b < n / QK5_1; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += q5_code(w[b].qs, qh, j) * xq[b].qs[j];
    acc += (fp16_to_fp32(w[b].d) * xq[b].d) * (float)isum;
    offs += fp16_to_fp32(w[b].m) * xq[b].s;
  }
  return acc + offs;
}

// Q8_0: w = dw * q, q int8 (including -128).
float dot_q8_0_ref(const void* row, const BlockQ8Act* xq, int64_t n) {
  const BlockQ8_0* w = static_cast<const BlockQ8_0*>(row);
  float acc = 0.0f;
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += w[b].qs[j] * xq[b].qs[j];
    acc += (fp16_to_fp32(w[b].d) * xq[b].d) * (float)isum;
  }
  return acc;
}

// ---- K-quants: super-blocks of 256 = 8 activation blocks (matvec_kernels.h) ----

// Code of element l (< 32) of 32-element piece k (< 8) of a Q4_K / Q5_K super-block: piece k is
// sub-block k, the low (k even) or high (k odd) nibbles of qs[32 * (k / 2) ..]; Q5_K's fifth bit
// is bit k of qh[l].
inline int q45_k_code(const uint8_t* qs, const uint8_t* qh, int k, int l) {
  const int nib = (qs[32 * (k / 2) + l] >> (4 * (k & 1))) & 0x0f;
  return qh ? nib | (((qh[l] >> k) & 1) << 4) : nib;
}

// Q4_K / Q5_K: per sub-block k, acc += (d*dx) * (sc_k * sum q a), offs += (dmin*m_k) * s.
template <class Block>
float dot_q45_k_ref(const void* row, const BlockQ8Act* xq, int64_t n) {
  const Block* w = static_cast<const Block*>(row);
  float acc = 0.0f, offs = 0.0f;
  for (int64_t sb = 0; sb < n / QK_K; ++sb) {
    const float d = fp16_to_fp32(w[sb].d), dmin = fp16_to_fp32(w[sb].dmin);
    const uint8_t* qh = nullptr;
    if constexpr (sizeof(Block) == sizeof(BlockQ5_K)) qh = w[sb].qh;
    for (int k = 0; k < QK_K / kActBlock; ++k) {
      const BlockQ8Act& a = xq[sb * (QK_K / kActBlock) + k];
      uint8_t sc, m;
      k_scale_min(k, w[sb].scales, &sc, &m);
      int isum = 0;
      for (int l = 0; l < kActBlock; ++l) isum += q45_k_code(w[sb].qs, qh, k, l) * a.qs[l];
      acc += (d * a.d) * (float)(sc * isum);
      offs += (dmin * (float)m) * a.s;
    }
  }
  return acc - offs;
}

// Q6_K: 32-element piece k = 4h + g of a super-block (h: half of 128, g: 32-group in it) takes the
// low (g < 2) or high nibbles of ql[64h + 32 (g & 1) ..] and bits 2g, 2g+1 of qh[32h ..] (layout:
// dequant.cpp); its first 16 elements use scale 2k, the last 16 scale 2k + 1. Codes are q - 32.
inline int q6_k_code(const BlockQ6_K& w, int k, int l) {
  const int h = k / 4, g = k % 4;
  const int nib = (w.ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 0x0f;
  const int hi = (w.qh[32 * h + l] >> (2 * g)) & 3;
  return (nib | (hi << 4)) - 32;
}

float dot_q6_k_ref(const void* row, const BlockQ8Act* xq, int64_t n) {
  const BlockQ6_K* w = static_cast<const BlockQ6_K*>(row);
  float acc = 0.0f;
  for (int64_t sb = 0; sb < n / QK_K; ++sb) {
    const float d = fp16_to_fp32(w[sb].d);
    for (int k = 0; k < QK_K / kActBlock; ++k) {
      const BlockQ8Act& a = xq[sb * (QK_K / kActBlock) + k];
      int lo = 0, hi = 0;
      for (int l = 0; l < 16; ++l) lo += q6_k_code(w[sb], k, l) * a.qs[l];
      for (int l = 16; l < 32; ++l) hi += q6_k_code(w[sb], k, l) * a.qs[l];
      acc += (d * a.d) * (float)(w[sb].scales[2 * k] * lo + w[sb].scales[2 * k + 1] * hi);
    }
  }
  return acc;
}

// Float rows are read through memcpy: a row of a GGUF tensor is only as aligned as the file's
// general.alignment and the row length make it (1-byte alignment is legal), so the kernel may not
// assume alignof(float) / alignof(uint16_t). memcpy of a scalar compiles to one unaligned load.
template <class T>
inline T load_unaligned(const unsigned char* p, int64_t j) {
  T v;
  std::memcpy(&v, p + j * (int64_t)sizeof(T), sizeof(T));
  return v;
}

float dot_f32_ref(const void* row, const float* x, int64_t n) {
  const auto* w = static_cast<const unsigned char*>(row);
  float acc = 0.0f;
  for (int64_t j = 0; j < n; ++j) acc += load_unaligned<float>(w, j) * x[j];
  return acc;
}

float dot_f16_ref(const void* row, const float* x, int64_t n) {
  const auto* w = static_cast<const unsigned char*>(row);
  float acc = 0.0f;
  for (int64_t j = 0; j < n; ++j) acc += fp16_to_fp32(load_unaligned<uint16_t>(w, j)) * x[j];
  return acc;
}

// The packed Q4_1 x8 group (matvec_packed.h): per (row, activation row) the fixed chain of fmas.
void packed_q4_1_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  for (int v = 0; v < nv; ++v) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + (size_t)b * kPackedQ4_1BlockBytes;
        const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
        int isum = 0;
        for (int c = 0; c < 4; ++c) {
          for (int i = 0; i < 4; ++i) {
            const uint8_t byte = blk[kPackedChunkBytes * c + 4 * r + i];
            isum += (byte & 0x0f) * a.qs[4 * c + i] + (byte >> 4) * a.qs[16 + 4 * c + i];
          }
        }
        const float d = fp16_to_fp32(load_unaligned<uint16_t>(blk + kPackedQ4_1ScaleAt, r));
        const float m = fp16_to_fp32(load_unaligned<uint16_t>(blk + kPackedQ4_1MinAt, r));
        acc = std::fma(d * a.d, (float)isum, acc);
        acc = std::fma(m, a.s, acc);
      }
      out[(size_t)v * kPackRows + r] = acc;
    }
  }
}

// The packed Q8_0 x8 group (matvec_packed.h).
void packed_q8_0_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  for (int v = 0; v < nv; ++v) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + (size_t)b * kPackedQ8_0BlockBytes;
        const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
        int isum = 0;
        for (int c = 0; c < 8; ++c)
          for (int i = 0; i < 4; ++i) isum += (int8_t)blk[kPackedChunkBytes * c + 4 * r + i] * a.qs[4 * c + i];
        acc = std::fma(fp16_to_fp32(load_unaligned<uint16_t>(blk + kPackedQ8_0ScaleAt, r)) * a.d, (float)isum, acc);
      }
      out[(size_t)v * kPackRows + r] = acc;
    }
  }
}

// The reference tile: one dot per (weight row, activation row) pair, so it equals Dot by definition.
template <QuantDotFn Dot>
void tile_ref(const uint8_t* rows, size_t row_bytes, int nr, const BlockQ8Act* xq, size_t xq_stride, int nv, int64_t n,
              float* y, size_t ldy) {
  for (int r = 0; r < nr; ++r)
    for (int v = 0; v < nv; ++v) y[(size_t)v * ldy + r] = Dot(rows + (size_t)r * row_bytes, xq + (size_t)v * xq_stride, n);
}

}  // namespace

// Constant-initialized (no code runs to build it; see matvec_dispatch.cpp).
extern const MatvecKernels kMatvecKernelsRef;
constinit const MatvecKernels kMatvecKernelsRef{
    Isa::scalar, "ref", quantize_act_ref, dot_q4_0_ref, dot_q4_1_ref, dot_q5_0_ref,
    dot_q5_1_ref, dot_q8_0_ref, dot_f32_ref, dot_f16_ref,
    tile_ref<dot_q4_0_ref>, tile_ref<dot_q4_1_ref>, tile_ref<dot_q5_0_ref>, tile_ref<dot_q5_1_ref>,
    tile_ref<dot_q8_0_ref>, dot_q45_k_ref<BlockQ4_K>, dot_q45_k_ref<BlockQ5_K>, dot_q6_k_ref,
    tile_ref<dot_q45_k_ref<BlockQ4_K>>, tile_ref<dot_q45_k_ref<BlockQ5_K>>, tile_ref<dot_q6_k_ref>,
    packed_q4_1_ref, packed_q8_0_ref, packed_q4_k_ref, packed_q6_k_ref, packed_q5_0_ref};

}  // namespace mpkv

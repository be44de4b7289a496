// Scalar reference kernels: the specification the AVX2 / AVX-512 variants are tested against.
// Per weight block the integer sum is exact; the block result is (dw*dx)*isum plus the offset term
// (m*s, or -8*dw*s / -16*dw*s), accumulated in fp32 in block order.
#include <cmath>
#include <cstring>

#include "matvec/matvec_kernels.h"
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
    tile_ref<dot_q8_0_ref>};

}  // namespace mpkv

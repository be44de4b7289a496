// Scalar dequantizers: the reference for every weight format mpkv reads. Each follows the ggml
// format definition (ggml-quants.c dequantize_row_*), block by block, in float arithmetic.
#include "gguf/dequant.h"

#include <cstring>

#include "gguf/kquant_scales.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {

namespace {

inline float half(uint16_t h) { return fp16_to_fp32(h); }

void dequant_f32(const uint8_t* src, float* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * sizeof(float)); }

void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);  // rows need not be 2-byte aligned
    dst[i] = fp16_to_fp32(h);
  }
}

void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}

// Q4_0: qs[j] low nibble -> weight j, high nibble -> weight j + 16; x = d * (q - 8).
void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += QK4_0) {
    const float d = half(b->d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = (float)((b->qs[j] & 0x0F) - 8) * d;
      y[j + QK4_0 / 2] = (float)((b->qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1: same nibble order; x = d * q + m.
void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += QK4_1) {
    const float d = half(b->d), m = half(b->m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      y[j] = (float)(b->qs[j] & 0x0F) * d + m;
      y[j + QK4_1 / 2] = (float)(b->qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0: qh (u32, little-endian) bit j is the 5th bit of weight j; x = d * (q - 16).
void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += QK5_0) {
    const float d = half(b->d);
    uint32_t qh;
    std::memcpy(&qh, b->qh, 4);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int hi0 = ((qh >> j) << 4) & 0x10;
      const int hi1 = (qh >> (j + 12)) & 0x10;  // bit j + 16
      y[j] = (float)(((b->qs[j] & 0x0F) | hi0) - 16) * d;
      y[j + QK5_0 / 2] = (float)(((b->qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

// Q5_1: as Q5_0 without the offset; x = d * q + m.
void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += QK5_1) {
    const float d = half(b->d), m = half(b->m);
    uint32_t qh;
    std::memcpy(&qh, b->qh, 4);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int hi0 = ((qh >> j) << 4) & 0x10;
      const int hi1 = (qh >> (j + 12)) & 0x10;
      y[j] = (float)((b->qs[j] & 0x0F) | hi0) * d + m;
      y[j + QK5_1 / 2] = (float)((b->qs[j] >> 4) | hi1) * d + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b, y += QK8_0) {
    const float d = half(b->d);
    for (int j = 0; j < QK8_0; ++j) y[j] = (float)b->qs[j] * d;
  }
}

// Q4_K: super-block of 256 = 4 chunks of 64; chunk c uses qs[32c .. 32c+32): low nibbles are
// sub-block 2c, high nibbles sub-block 2c+1. x = d * scale * q - dmin * min.
void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b) {
    const float d = half(b->d), dmin = half(b->dmin);
    const uint8_t* q = b->qs;
    for (int c = 0; c < QK_K / 64; ++c, q += 32) {
      uint8_t sc, m;
      k_scale_min(2 * c, b->scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(2 * c + 1, b->scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (float)(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
  }
}

// Q5_K: as Q4_K plus a 5th bit: for chunk c, bit 2c of qh[l] tops weight l of sub-block 2c and
// bit 2c+1 tops weight l of sub-block 2c+1.
void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b) {
    const float d = half(b->d), dmin = half(b->dmin);
    const uint8_t* ql = b->qs;
    const uint8_t* qh = b->qh;
    for (int c = 0; c < QK_K / 64; ++c, ql += 32) {
      uint8_t sc, m;
      k_scale_min(2 * c, b->scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(2 * c + 1, b->scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *y++ = d1 * (float)((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

// Q6_K: 16 sub-blocks of 16 with int8 scales; q = 4 low bits (ql) | 2 high bits (qh) << 4, minus 32.
// Per half (128 weights) h: ql[64h..], qh[32h..], scales[8h..]; for l < 32:
//   weight l      : ql[l] & 15,      qh[l] bits 0-1, scale[l/16]
//   weight l + 32 : ql[l + 32] & 15, qh[l] bits 2-3, scale[l/16 + 2]
//   weight l + 64 : ql[l] >> 4,      qh[l] bits 4-5, scale[l/16 + 4]
//   weight l + 96 : ql[l + 32] >> 4, qh[l] bits 6-7, scale[l/16 + 6]
void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, ++b) {
    const float d = half(b->d);
    const uint8_t* ql = b->ql;
    const uint8_t* qh = b->qh;
    const int8_t* sc = b->scales;
    for (int h = 0; h < QK_K / 128; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * (float)sc[is] * (float)q1;
        y[l + 32] = d * (float)sc[is + 2] * (float)q2;
        y[l + 64] = d * (float)sc[is + 4] * (float)q3;
        y[l + 96] = d * (float)sc[is + 6] * (float)q4;
      }
    }
  }
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  MPKV_CHECK(info != nullptr, "dequantize_row: " + ggml_type_name(static_cast<uint32_t>(type)));
  MPKV_CHECK(info->supported, std::string("dequantize_row: ggml type ") + info->name + " is not supported by mpkv");
  MPKV_CHECK(n >= 0 && n % info->block_size == 0,
             "dequantize_row: " + std::to_string(n) + " elements of " + info->name +
                 " is not a multiple of the block size " + std::to_string(info->block_size));
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t nb = n / info->block_size;
  switch (type) {
    case GgmlType::F32: dequant_f32(s, dst, n); return;
    case GgmlType::F16: dequant_f16(s, dst, n); return;
    case GgmlType::BF16: dequant_bf16(s, dst, n); return;
    case GgmlType::Q4_0: dequant_q4_0(reinterpret_cast<const BlockQ4_0*>(s), dst, nb); return;
    case GgmlType::Q4_1: dequant_q4_1(reinterpret_cast<const BlockQ4_1*>(s), dst, nb); return;
    case GgmlType::Q5_0: dequant_q5_0(reinterpret_cast<const BlockQ5_0*>(s), dst, nb); return;
    case GgmlType::Q5_1: dequant_q5_1(reinterpret_cast<const BlockQ5_1*>(s), dst, nb); return;
    case GgmlType::Q8_0: dequant_q8_0(reinterpret_cast<const BlockQ8_0*>(s), dst, nb); return;
    case GgmlType::Q4_K: dequant_q4_k(reinterpret_cast<const BlockQ4_K*>(s), dst, nb); return;
    case GgmlType::Q5_K: dequant_q5_k(reinterpret_cast<const BlockQ5_K*>(s), dst, nb); return;
    case GgmlType::Q6_K: dequant_q6_k(reinterpret_cast<const BlockQ6_K*>(s), dst, nb); return;
    default: break;
  }
  throw Error(std::string("dequantize_row: ggml type ") + info->name + " has no dequantizer");
}

}  // namespace mpkv

// Repacking of Q4_K / Q6_K super-blocks into the x16 pieces of matvec_packed_kquant.h.
#include "matvec/matvec_packed_kquant.h"

#include <cstring>

#include "gguf/kquant_scales.h"
#include "matvec/matvec.h"
#include "matvec/matvec_packed.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {

namespace {

constexpr int kPiecesPerSuper = QK_K / 32;

// Code l of piece k of a Q4_K super-block: sub-block k is the low (k even) or high (k odd) nibbles
// of qs[32 (k / 2) ..] (gguf/dequant.cpp).
int q4_k_code(const BlockQ4_K& w, int k, int l) { return (w.qs[32 * (k / 2) + l] >> (4 * (k % 2))) & 0x0f; }

// Piece k = 4h + g of a Q6_K super-block (h: half of 128, g: 32-group in it): low (g < 2) or high
// nibbles of ql[64h + 32 (g % 2) ..] and bits 2g, 2g+1 of qh[32h ..] (gguf/dequant.cpp), minus 32.
int q6_k_code(const BlockQ6_K& w, int k, int l) {
  const int h = k / 4, g = k % 4;
  const int nib = (w.ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0f;
  return (nib | (((w.qh[32 * h + l] >> (2 * g)) & 3) << 4)) - 32;
}

void pack_q4_k_piece(const BlockQ4_K& w, int k, int r, uint8_t* out) {
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 4; ++i)
      out[kPackedChunkBytes * c + 4 * r + i] = (uint8_t)(q4_k_code(w, k, 4 * c + i) | q4_k_code(w, k, 16 + 4 * c + i) << 4);
  uint8_t sc, m;
  k_scale_min(k, w.scales, &sc, &m);
  const float d = fp16_to_fp32(w.d) * (float)sc, mn = -(fp16_to_fp32(w.dmin) * (float)m);
  std::memcpy(out + kPackedQ4_KScaleAt + 4 * r, &d, 4);
  std::memcpy(out + kPackedQ4_KMinAt + 4 * r, &mn, 4);
}

void pack_q6_k_piece(const BlockQ6_K& w, int k, int r, uint8_t* out) {
  for (int c = 0; c < 8; ++c)
    for (int i = 0; i < 4; ++i) out[kPackedChunkBytes * c + 4 * r + i] = (uint8_t)(int8_t)q6_k_code(w, k, 4 * c + i);
  std::memcpy(out + kPackedQ6_KScaleAt + 2 * r, &w.d, 2);
  int32_t offset = 0;
  for (int half = 0; half < 2; ++half) {
    const int16_t sc = w.scales[2 * k + half];
    const int16_t pair[2] = {sc, sc};
    std::memcpy(out + kPackedQ6_KSubScaleAt + kPackedQ6_KSubScaleBytes * half + 4 * r, pair, 4);
    int32_t csum = 0;
    for (int l = 16 * half; l < 16 * half + 16; ++l) csum += q6_k_code(w, k, l);
    offset += 128 * sc * csum;
  }
  std::memcpy(out + kPackedQ6_KOffsetAt + 4 * r, &offset, 4);
}

}  // namespace

size_t packed_kquant_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K: return kPackedQ4_KBlockBytes;
    case GgmlType::Q6_K: return kPackedQ6_KBlockBytes;
    default: return 0;
  }
}

void pack_kquant_block(const WeightMatrix& w, int64_t g, int64_t b, uint8_t* out) {
  MPKV_ASSERT(packed_kquant_block_bytes(w.type) > 0, "pack_kquant_block: not a packed K-quant type");
  const int64_t sb = b / kPiecesPerSuper;
  const int k = (int)(b % kPiecesPerSuper);
  for (int r = 0; r < kPackRows; ++r) {
    const int64_t row = g * kPackRows + r;
    if (row >= w.rows) continue;
    const uint8_t* src = w.data + (size_t)row * w.row_bytes;
    if (w.type == GgmlType::Q4_K) pack_q4_k_piece(reinterpret_cast<const BlockQ4_K*>(src)[sb], k, r, out);
    else pack_q6_k_piece(reinterpret_cast<const BlockQ6_K*>(src)[sb], k, r, out);
  }
}

}  // namespace mpkv

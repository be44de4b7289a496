// The K-quant weight types of the tile kernel (matvec_tile_x86.h): Q4_K, Q5_K, Q6_K. Include ONLY
// from matvec_avx2.cpp / matvec_avx512.cpp (internal linkage; see matvec_x86_helpers.h).
//
// A super-block of 256 is 8 pieces of 32, one per activation block (matvec_kernels.h). prep()
// decodes the super-block header once per (weight row, super-block); codes(w, k) expands piece k
// to 32 bytes; dot() folds the piece's sub-block scale(s) into the integer sums through the madd
// that adds the maddubs pairs (int16 scale lanes instead of ones), so isum8 stays exact:
//   Q4_K / Q5_K: pairs <= 2 * 31 * 127, times a 6-bit scale, two per lane: < 2^20;
//   Q6_K: codes q - 32 in [-32, 31] through the sign trick (|c| <= 32, so maddubs cannot saturate),
//         the low 16 bytes (int16 lanes 0-7) times scale 2k, the high 16 times scale 2k + 1.
#pragma once
#include <cstring>

#include "matvec/matvec_tile_x86.h"

namespace mpkv {
namespace {

// The 8 (6-bit scale, 6-bit min) pairs of a Q4_K / Q5_K super-block (packing: gguf/kquant_scales.h),
// unpacked four at a time with 32-bit word operations; with a, b, c the words at bytes 0, 4, 8:
//   scales 0-3 = a & 63 (per byte), scales 4-7 = (c & 15) | (a >> 6) << 4,
//   mins   0-3 = b & 63,            mins   4-7 = (c >> 4) | (b >> 6) << 4.
struct KScalesMins {
  uint8_t sc[8], m[8];
};

inline KScalesMins x86_unpack_k_scales(const uint8_t* q) {
  uint32_t a, b, c;
  std::memcpy(&a, q, 4);
  std::memcpy(&b, q + 4, 4);
  std::memcpy(&c, q + 8, 4);
  const uint32_t sc[2] = {a & 0x3f3f3f3fu, (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4)};
  const uint32_t m[2] = {b & 0x3f3f3f3fu, ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4)};
  KScalesMins out;
  std::memcpy(out.sc, sc, 8);
  std::memcpy(out.m, m, 8);
  return out;
}

// Bytes shifted right by `bits` (< 8) within each byte, then masked: (x >> bits) & mask per byte.
inline __m256i x86_bytes_shift_mask(__m256i x, int bits, char mask) {
  return _mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(bits)), _mm256_set1_epi8(mask));
}

// Byte-shuffle masks that broadcast int16 lane k of a 128-bit half to all 8 int16 lanes of each half.
alignas(32) constexpr uint8_t kPickInt16[8][32] = {
#define MPKV_PICK(k) {2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, \
                      2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, \
                      2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1}
    MPKV_PICK(0), MPKV_PICK(1), MPKV_PICK(2), MPKV_PICK(3), MPKV_PICK(4), MPKV_PICK(5), MPKV_PICK(6), MPKV_PICK(7)};
#undef MPKV_PICK

inline __m256i x86_pick_int16(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPickInt16[k])));
}

// Q4_K / Q5_K: piece k is sub-block k, the low (k even) or high (k odd) nibbles of qs[32 (k/2) ..];
// Q5_K adds bit k of qh[l] as bit 4 of code l. prep() widens the 8 scales to int16 (both halves)
// and the 8 offset coefficients dmin * m_k to fp32 lanes (kLaneOffset).
template <class B>
struct TileQ45_K {
  using Block = B;
  struct Prep {
    float d;
    __m256i sc16;  // int16 lane k (of each 128-bit half) = scale of sub-block k
    __m256 mins;   // lane k = dmin * m_k
  };
  static constexpr int kPieces = QK_K / kActBlock;
  static constexpr bool kOffset = false, kLaneOffset = true;
  static constexpr float kOffsetFactor = 0.0f;
  static Prep prep(const Block& w) {
    const KScalesMins s = x86_unpack_k_scales(w.scales);
    const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.sc));
    const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.m));
    return {x86_fp16(w.d), _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8)),
            _mm256_mul_ps(_mm256_set1_ps(x86_fp16(w.dmin)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)))};
  }
  static __m256i codes(const Block& w, int k) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * (k >> 1)));
    const __m256i nib = x86_bytes_shift_mask(q, 4 * (k & 1), 0x0f);
    if constexpr (sizeof(Block) == sizeof(BlockQ4_K)) {
      return nib;
    } else {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh));
      return _mm256_or_si256(nib, _mm256_slli_epi16(x86_bytes_shift_mask(qh, k, 1), 4));
    }
  }
  static float offset(const Prep&, int) { return 0.0f; }
  static __m256 dot(__m256i c, __m256i a, const Prep& p, int k) {
    const __m256i pairs = _mm256_maddubs_epi16(c, a);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, x86_pick_int16(p.sc16, k)));
  }
};
using TileQ4_K = TileQ45_K<BlockQ4_K>;
using TileQ5_K = TileQ45_K<BlockQ5_K>;

// Q6_K: piece k = 4h + g takes the low (g < 2) or high nibbles of ql[64h + 32 (g & 1) ..] and bits
// 2g, 2g+1 of qh[32h ..] (layout: gguf/dequant.cpp); codes are q - 32 as signed bytes. prep()
// widens the 16 int8 scales to int16; piece k needs scale 2k in the low half and 2k + 1 in the
// high half: the int32 lane k holds exactly that pair, broadcast, then each half picks its int16.
struct TileQ6_K {
  using Block = BlockQ6_K;
  struct Prep {
    float d;
    __m256i s16;  // int16 lane j = scale j
  };
  static constexpr int kPieces = QK_K / kActBlock;
  static constexpr bool kOffset = false, kLaneOffset = false;
  static constexpr float kOffsetFactor = 0.0f;
  static Prep prep(const Block& w) {
    return {x86_fp16(w.d), _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)))};
  }
  static __m256i codes(const Block& w, int k) {
    const int h = k >> 2, g = k & 3;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.ql + 64 * h + 32 * (g & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh + 32 * h));
    const __m256i q = _mm256_or_si256(x86_bytes_shift_mask(ql, 4 * (g >> 1), 0x0f),
                                      _mm256_slli_epi16(x86_bytes_shift_mask(qh, 2 * g, 3), 4));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(32));
  }
  static float offset(const Prep&, int) { return 0.0f; }
  static __m256 dot(__m256i c, __m256i a, const Prep& p, int k) {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(c, c), _mm256_sign_epi8(a, c));
    const __m256i pair = _mm256_permutevar8x32_epi32(p.s16, _mm256_set1_epi32(k));  // (sc[2k], sc[2k+1]) everywhere
    const __m256i sc = _mm256_shuffle_epi8(pair, _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                                                  2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, sc));
  }
};

}  // namespace
}  // namespace mpkv

// The packed K-quant microkernels (matvec_packed_kquant.h) for x86: block-sum policies for the
// packed kernels of matvec_packed_x86.h (256-bit) and matvec_avx512vnni.cpp (512-bit). Include
// ONLY from matvec_avx2.cpp / matvec_avx512.cpp / matvec_avx512vnni.cpp, after
// matvec_packed_x86.h (internal linkage, as matvec_x86_helpers.h explains).
//
// Q4_K: a packed piece is a Q4_1 block whose per-row scale and min are fp32 (kScalesF32), so the
//   Q4_1 sums serve unchanged.
// Q6_K on AVX2: signed codes in [-32, 31] through the sign trick (|c| <= 32 unsigned against
//   sign(a, c)), so a maddubs int16 lane (two products) is at most 2 * 32 * 127 = 8128 and the four
//   chunks of a 16-code half add up in int16 (<= 32512) before one madd with the half's int8 scale
//   (stored as an int16 pair per row) takes them to int32. AVX-512 VNNI: see Sums512Q6_K.
#pragma once
#include "matvec/matvec_packed_kquant.h"
#include "matvec/matvec_packed_x86.h"

namespace mpkv {
namespace {

template <class Dot>
struct SumsQ4_K : SumsQ4_1<Dot> {
  static constexpr size_t kBlockBytes = kPackedQ4_KBlockBytes, kScaleAt = kPackedQ4_KScaleAt, kMinAt = kPackedQ4_KMinAt;
  static constexpr bool kScalesF32 = true;
};

// Q6_K on AVX2 (one half of a group: blk is offset by the half, as in matvec_packed_x86.h).
struct SumsQ6_KMaddubs {
  static constexpr size_t kBlockBytes = kPackedQ6_KBlockBytes, kScaleAt = kPackedQ6_KScaleAt, kMinAt = 0;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m256i* isum) {
    for (int v = 0; v < V; ++v) isum[v] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      __m256i s16[V];
      for (int v = 0; v < V; ++v) s16[v] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int c = 4 * half; c < 4 * half + 4; ++c) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedChunkBytes * c));
        const __m256i wabs = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v)
          s16[v] = _mm256_add_epi16(
              s16[v], _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(packed_act4(a[(size_t)v * stride], c), w)));
      }
      const __m256i sc = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(blk + kPackedQ6_KSubScaleAt + kPackedQ6_KSubScaleBytes * half));
      for (int v = 0; v < V; ++v) isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(s16[v], sc));
    }
  }
};

#if defined(__AVX512VNNI__)
// Q6_K on AVX-512 VNNI, a whole group: vpdpbusd of the activation codes as a + 128 (xor 0x80,
// unsigned) against the signed codes, per 16-code half S_h = sum (a + 128) c (|S_h| <= 16 * 255 *
// 32); then isum = sc_lo * S_lo + sc_hi * S_hi - K (the row's stored 128-times-code-sum term,
// matvec_packed_kquant.h), all exact in int32 (|sc * S_h| < 2^24).
struct Sums512Q6_K {
  static constexpr size_t kBlockBytes = kPackedQ6_KBlockBytes, kScaleAt = kPackedQ6_KScaleAt, kMinAt = 0;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m512i* isum) {
    __m512i s[2][V];
    for (int v = 0; v < V; ++v) s[0][v] = s[1][v] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512i w = _mm512_loadu_si512(blk + kPackedChunkBytes * c);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        const __m512i act = _mm512_set1_epi32(packed_act_word(a[(size_t)v * stride], c) ^ (int32_t)0x80808080u);
        s[c / 4][v] = _mm512_dpbusd_epi32(s[c / 4][v], act, w);
      }
    }
    // Each 32-bit scale word holds the scale twice as int16: the arithmetic shift keeps one.
    const __m512i sc_lo = _mm512_srai_epi32(_mm512_loadu_si512(blk + kPackedQ6_KSubScaleAt), 16);
    const __m512i sc_hi = _mm512_srai_epi32(_mm512_loadu_si512(blk + kPackedQ6_KSubScaleAt + kPackedQ6_KSubScaleBytes), 16);
    const __m512i off = _mm512_loadu_si512(blk + kPackedQ6_KOffsetAt);
    for (int v = 0; v < V; ++v)
      isum[v] = _mm512_sub_epi32(
          _mm512_add_epi32(_mm512_mullo_epi32(s[0][v], sc_lo), _mm512_mullo_epi32(s[1][v], sc_hi)), off);
  }
};
#endif

}  // namespace
}  // namespace mpkv

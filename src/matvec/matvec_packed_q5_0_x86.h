// The packed Q5_0 microkernel (matvec_packed_q5_0.h) for x86: block-sum policies for the packed
// kernels of matvec_packed_x86.h (256-bit) and matvec_avx512vnni.cpp (512-bit). Include ONLY from
// matvec_avx2.cpp / matvec_avx512.cpp / matvec_avx512vnni.cpp, after matvec_packed_x86.h (internal
// linkage, as matvec_x86_helpers.h explains).
//
// Chunk c (0..3) gives codes 4c + i (low nibbles) and 16 + 4c + i (high nibbles); their 5th bits are
// bits c and 4 + c of the high-bit plane's byte, moved to bit 4 by a 16-bit shift (left by 4 - c,
// right by c) and masked: the bits a 16-bit shift carries across a byte boundary land below bit 4
// (left shift by <= 4) or above it (right shift by <= 3), so the mask drops them.
#pragma once
#include "matvec/matvec_packed_q5_0.h"
#include "matvec/matvec_packed_x86.h"

namespace mpkv {
namespace {

// AVX2 (one half of a group; blk is offset by the half, as in matvec_packed_x86.h): codes <= 31, so
// a maddubs int16 lane is at most 2 * 31 * 127 = 7874 and four chunks add up in int16 (31496) before
// a madd: the low-nibble and high-nibble codes keep an int16 sum each.
struct SumsQ5_0Maddubs {
  static constexpr size_t kBlockBytes = kPackedQ5_0BlockBytes, kScaleAt = kPackedQ5_0ScaleAt, kMinAt = kPackedQ5_0MinAt;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m256i* isum) {
    const __m256i low = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedQ5_0HighBitsAt));
    __m256i slo[V], shi[V];
    for (int v = 0; v < V; ++v) slo[v] = shi[v] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedChunkBytes * c));
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(raw, low),
                                         _mm256_and_si256(_mm256_sll_epi16(hb, _mm_cvtsi32_si128(4 - c)), bit4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low),
                                         _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(c)), bit4));
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        slo[v] = _mm256_add_epi16(slo[v], _mm256_maddubs_epi16(lo, packed_act4(a[(size_t)v * stride], c)));
        shi[v] = _mm256_add_epi16(shi[v], _mm256_maddubs_epi16(hi, packed_act4(a[(size_t)v * stride], c + 4)));
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int v = 0; v < V; ++v)
      isum[v] = _mm256_add_epi32(_mm256_madd_epi16(slo[v], ones), _mm256_madd_epi16(shi[v], ones));
  }
};

#if defined(__AVX512VNNI__)
// AVX-512 VNNI, a whole group: vpdpbusd of the unsigned codes against the activation codes.
struct Sums512Q5_0 {
  static constexpr size_t kBlockBytes = kPackedQ5_0BlockBytes, kScaleAt = kPackedQ5_0ScaleAt, kMinAt = kPackedQ5_0MinAt;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m512i* isum) {
    const __m512i low = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
    const __m512i hb = _mm512_loadu_si512(blk + kPackedQ5_0HighBitsAt);
    for (int v = 0; v < V; ++v) isum[v] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = _mm512_loadu_si512(blk + kPackedChunkBytes * c);
      const __m512i lo = _mm512_or_si512(_mm512_and_si512(raw, low),
                                         _mm512_and_si512(_mm512_sll_epi16(hb, _mm_cvtsi32_si128(4 - c)), bit4));
      const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low),
                                         _mm512_and_si512(_mm512_srl_epi16(hb, _mm_cvtsi32_si128(c)), bit4));
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        isum[v] = _mm512_dpbusd_epi32(isum[v], lo, _mm512_set1_epi32(packed_act_word(a[(size_t)v * stride], c)));
        isum[v] = _mm512_dpbusd_epi32(isum[v], hi, _mm512_set1_epi32(packed_act_word(a[(size_t)v * stride], c + 4)));
      }
    }
  }
};
#endif

}  // namespace
}  // namespace mpkv

// AVX2 building blocks shared by matvec_avx2.cpp and matvec_avx512.cpp. Include ONLY from those
// files (they are compiled with -mavx2 / -mavx512*).
//
// Everything here has internal linkage (anonymous namespace) on purpose: an ordinary inline
// function compiled once with AVX2 flags and once with AVX-512 flags would be merged by the linker
// into one copy, and the AVX-512 copy could then run on an AVX2-only CPU.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace mpkv {
namespace {

// 32 nibbles of a Q4/Q5 block as 32 bytes in weight order: byte j (< 16) = low nibble of qs[j],
// byte j + 16 = high nibble of qs[j].
inline __m256i x86_bytes_from_nibbles_32(const uint8_t* qs) {
  const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i bytes = _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
  return _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f));
}

// Bit j of the little-endian u32 at `bits` -> byte j = 0xff (set) or 0x00, for j in [0, 32).
inline __m256i x86_bytes_from_bits_32(const uint8_t* bits) {
  uint32_t x32;
  std::memcpy(&x32, bits, 4);
  // Byte lane k of each 8-byte group takes source byte (group index); then test bit (k) in it.
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
  // OR with every bit except bit k set in byte k: the byte is all ones iff bit k was set.
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// 5-bit codes of a Q5 block (qs nibbles | qh bit << 4) as 32 unsigned bytes in [0, 31].
inline __m256i x86_q5_codes_32(const uint8_t* qs, const uint8_t* qh) {
  const __m256i hi = _mm256_and_si256(x86_bytes_from_bits_32(qh), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(x86_bytes_from_nibbles_32(qs), hi);
}

// sum of ux[i] * sy[i] over each group of 4 bytes, as 8 floats; ux unsigned (< 256), sy signed.
// maddubs adds byte pairs into int16 with saturation; a pair is at most 2 * 128 * 127 = 32512 < 32767
// when ux <= 128 and |sy| <= 127, which holds for every caller (codes <= 31, or |q8| <= 128 via the
// sign trick; activation codes are in [-127, 127]), so it never saturates.
inline __m256 x86_dot_us8_groups(__m256i ux, __m256i sy) {
  const __m256i pairs = _mm256_maddubs_epi16(ux, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// Same for two signed operands: |x| against y with x's sign moved onto y.
inline __m256 x86_dot_ss8_groups(__m256i sx, __m256i sy) {
  return x86_dot_us8_groups(_mm256_sign_epi8(sx, sx), _mm256_sign_epi8(sy, sx));
}

inline float x86_hsum_ps(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline float x86_fp16(uint16_t h) { return _cvtsh_ss(h); }

}  // namespace
}  // namespace mpkv

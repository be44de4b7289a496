// AVX-512 (F + BW + VL + DQ) kernels: the integer math of matvec_ref.cpp, two 32-weight blocks per
// 512-bit step (block b in the low 256 bits, block b+1 in the high 256 bits); an odd last block uses
// the 256-bit path. The codes are expanded with the AVX2 helpers, then one _mm512_maddubs_epi16 +
// _mm512_madd_epi16 covers both blocks, and one fma applies both blocks' dw*dx.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*() (a known
// false positive, GCC bug 105593); the code here reads no uninitialized value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_x86_helpers.h"

namespace mpkv {

namespace {

void quantize_act_avx512(const float* x, BlockQ8Act* out, int64_t n) {
  for (int64_t b = 0; b < n / kActBlock; ++b) {
    const float* xb = x + b * kActBlock;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    // Scalar d and 1/d exactly as in quantize_act_ref, so the codes match it bit for bit.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // half to even
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, vid), kRound));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, vid), kRound));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    // Codes are within [-127, 127], so the saturating narrowing is exact.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), _mm512_cvtsepi32_epi8(i1));
    out[b].d = d;
    out[b].s = d * (float)sum;
  }
}

inline __m256i load_act(const BlockQ8Act& a) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs)); }

inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// Scales for a pair of blocks: s0 in the low 8 lanes, s1 in the high 8 lanes.
inline __m512 scale_pair(float s0, float s1) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(s0)), _mm256_set1_ps(s1), 1);
}

// Both blocks' 8-per-block group sums of ux * sy as 16 floats (same saturation argument as AVX2).
inline __m512 dot_us8_groups_512(__m512i ux, __m512i sy) {
  const __m512i pairs = _mm512_maddubs_epi16(ux, sy);
  return _mm512_cvtepi32_ps(_mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
}

inline float hsum_512(__m512 acc, __m256 tail) {
  return _mm512_reduce_add_ps(acc) + x86_hsum_ps(tail);
}

// Shared loop of the four 4/5-bit types: Codes(block) -> 32 unsigned code bytes, Offset(block, act)
// -> the block's offset term (m*s, or dw*s scaled after the loop by the caller).
template <class Block, class Codes, class Offset>
inline float dot_unsigned_codes(const Block* w, const BlockQ8Act* xq, int64_t nb, Codes codes, Offset offset) {
  __m512 acc = _mm512_setzero_ps();
  __m256 tail = _mm256_setzero_ps();
  float offs = 0.0f;
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512 sums = dot_us8_groups_512(join(codes(w[b]), codes(w[b + 1])), join(load_act(xq[b]), load_act(xq[b + 1])));
    acc = _mm512_fmadd_ps(scale_pair(x86_fp16(w[b].d) * xq[b].d, x86_fp16(w[b + 1].d) * xq[b + 1].d), sums, acc);
    offs += offset(w[b], xq[b]) + offset(w[b + 1], xq[b + 1]);
  }
  for (; b < nb; ++b) {
    tail = _mm256_fmadd_ps(_mm256_set1_ps(x86_fp16(w[b].d) * xq[b].d), x86_dot_us8_groups(codes(w[b]), load_act(xq[b])),
                           tail);
    offs += offset(w[b], xq[b]);
  }
  return hsum_512(acc, tail) + offs;
}

float dot_q4_0_avx512(const void* row, const BlockQ8Act* xq, int64_t n) {
  // w = dw*(q - 8): the offset term is -8 * dw * s.
  return dot_unsigned_codes(
      static_cast<const BlockQ4_0*>(row), xq, n / QK4_0,
      [](const BlockQ4_0& blk) { return x86_bytes_from_nibbles_32(blk.qs); },
      [](const BlockQ4_0& blk, const BlockQ8Act& a) { return -8.0f * (x86_fp16(blk.d) * a.s); });
}

float dot_q4_1_avx512(const void* row, const BlockQ8Act* xq, int64_t n) {
  return dot_unsigned_codes(
      static_cast<const BlockQ4_1*>(row), xq, n / QK4_1,
      [](const BlockQ4_1& blk) { return x86_bytes_from_nibbles_32(blk.qs); },
      [](const BlockQ4_1& blk, const BlockQ8Act& a) { return x86_fp16(blk.m) * a.s; });
}

float dot_q5_0_avx512(const void* row, const BlockQ8Act* xq, int64_t n) {
  return dot_unsigned_codes(
      static_cast<const BlockQ5_0*>(row), xq, n / QK5_0,
      [](const BlockQ5_0& blk) { return x86_q5_codes_32(blk.qs, blk.qh); },
      [](const BlockQ5_0& blk, const BlockQ8Act& a) { return -16.0f * (x86_fp16(blk.d) * a.s); });
}

float dot_q5_1_avx512(const void* row, const BlockQ8Act* xq, int64_t n) {
  return dot_unsigned_codes(
      static_cast<const BlockQ5_1*>(row), xq, n / QK5_1,
      [](const BlockQ5_1& blk) { return x86_q5_codes_32(blk.qs, blk.qh); },
      [](const BlockQ5_1& blk, const BlockQ8Act& a) { return x86_fp16(blk.m) * a.s; });
}

inline __m256i load_q8(const BlockQ8_0& blk) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)); }

float dot_q8_0_avx512(const void* row, const BlockQ8Act* xq, int64_t n) {
  const BlockQ8_0* w = static_cast<const BlockQ8_0*>(row);
  const int64_t nb = n / QK8_0;
  __m512 acc = _mm512_setzero_ps();
  __m256 tail = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512i wx = join(load_q8(w[b]), load_q8(w[b + 1]));
    const __m512i ax = join(load_act(xq[b]), load_act(xq[b + 1]));
    // |w| (unsigned; -128 -> 128) against the activation negated where w < 0 (no 512-bit psignb).
    const __m512i absw = _mm512_abs_epi8(wx);
    const __m512i sy = _mm512_mask_sub_epi8(ax, _mm512_movepi8_mask(wx), _mm512_setzero_si512(), ax);
    acc = _mm512_fmadd_ps(scale_pair(x86_fp16(w[b].d) * xq[b].d, x86_fp16(w[b + 1].d) * xq[b + 1].d),
                          dot_us8_groups_512(absw, sy), acc);
  }
  for (; b < nb; ++b) {
    tail = _mm256_fmadd_ps(_mm256_set1_ps(x86_fp16(w[b].d) * xq[b].d), x86_dot_ss8_groups(load_q8(w[b]), load_act(xq[b])),
                           tail);
  }
  return hsum_512(acc, tail);
}

float dot_f32_avx512(const void* row, const float* x, int64_t n) {
  const float* w = static_cast<const float*>(row);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 16), _mm512_loadu_ps(x + j + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 32), _mm512_loadu_ps(x + j + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 48), _mm512_loadu_ps(x + j + 48), a3);
  }
  for (; j + 16 <= n; j += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), a0);
  if (j < n) {  // masked tail: reads only the remaining n - j elements
    const __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + j), _mm512_maskz_loadu_ps(m, x + j), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

float dot_f16_avx512(const void* row, const float* x, int64_t n) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  auto load16 = [](const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  };
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    a0 = _mm512_fmadd_ps(load16(w + j), _mm512_loadu_ps(x + j), a0);
    a1 = _mm512_fmadd_ps(load16(w + j + 16), _mm512_loadu_ps(x + j + 16), a1);
    a2 = _mm512_fmadd_ps(load16(w + j + 32), _mm512_loadu_ps(x + j + 32), a2);
    a3 = _mm512_fmadd_ps(load16(w + j + 48), _mm512_loadu_ps(x + j + 48), a3);
  }
  for (; j + 16 <= n; j += 16) a0 = _mm512_fmadd_ps(load16(w + j), _mm512_loadu_ps(x + j), a0);
  if (j < n) {  // masked tail
    const __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
    const __m512 wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + j));
    a1 = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + j), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

}  // namespace

// Constant-initialized (no code runs to build it; see matvec_dispatch.cpp).
extern const MatvecKernels kMatvecKernelsAvx512;
constinit const MatvecKernels kMatvecKernelsAvx512{
    Isa::avx512, "avx512", quantize_act_avx512, dot_q4_0_avx512, dot_q4_1_avx512, dot_q5_0_avx512,
    dot_q5_1_avx512, dot_q8_0_avx512, dot_f32_avx512, dot_f16_avx512};

}  // namespace mpkv

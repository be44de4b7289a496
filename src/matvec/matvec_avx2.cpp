// AVX2 + FMA + F16C kernels: the same integer math as matvec_ref.cpp, 32 weights per step.
// The integer-dot types run through the tile kernel of matvec_tile_x86.h (per block: codes expanded
// to 32 bytes, _mm256_maddubs_epi16 + _mm256_madd_epi16 -> 8 int32 partial sums, converted and
// fma'd with dw*dx into one fp32 accumulator per row pair); the single-row dot is its 1 x 1 tile, so
// a row's result is the same in any tile (matvec_kernels.h, QuantTileFn).
#include <cstring>

#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed_kquant_x86.h"
#include "matvec/matvec_packed_q5_0_x86.h"
#include "matvec/matvec_packed_x86.h"
#include "matvec/matvec_tile_kquant_x86.h"
#include "matvec/matvec_tile_x86.h"

namespace mpkv {

namespace {

void quantize_act_avx2(const float* x, BlockQ8Act* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kActBlock; ++b) {
    const float* xb = x + b * kActBlock;
    __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
    __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    // Scalar d and 1/d exactly as in quantize_act_ref, so the codes match it bit for bit.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // half to even
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, vid), kRound));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, vid), kRound));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, vid), kRound));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, vid), kRound));
    // Block sum of the codes.
    __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    __m128i s4 = _mm_add_epi32(_mm256_extracti128_si256(s8, 1), _mm256_castsi256_si128(s8));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    const int sum = _mm_cvtsi128_si32(s4);
    // int32 -> int8; the packs interleave 128-bit lanes, the permute restores element order.
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), i0);
    out[b].d = d;
    out[b].s = d * (float)sum;
  }
}

float dot_f32_avx2(const void* row, const float* x, int64_t n) {
  const float* w = static_cast<const float*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
  }
  for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
  float acc = x86_hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; j < n; ++j) {  // the row may be unaligned (see dot_f32_ref): memcpy, not w[j]
    float wj;
    std::memcpy(&wj, w + j, sizeof wj);
    acc += wj * x[j];
  }
  return acc;
}

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

float dot_f16_avx2(const void* row, const float* x, int64_t n) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    a0 = _mm256_fmadd_ps(load_f16x8(w + j), _mm256_loadu_ps(x + j), a0);
    a1 = _mm256_fmadd_ps(load_f16x8(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
    a2 = _mm256_fmadd_ps(load_f16x8(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
    a3 = _mm256_fmadd_ps(load_f16x8(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
  }
  for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(load_f16x8(w + j), _mm256_loadu_ps(x + j), a0);
  float acc = x86_hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; j < n; ++j) {
    uint16_t wj;
    std::memcpy(&wj, w + j, sizeof wj);
    acc += x86_fp16(wj) * x[j];
  }
  return acc;
}

}  // namespace

// Constant-initialized (no code runs to build it; see matvec_dispatch.cpp).
extern const MatvecKernels kMatvecKernelsAvx2;
constinit const MatvecKernels kMatvecKernelsAvx2{
    Isa::avx2, "avx2", quantize_act_avx2,
    quant_dot_as_tile<TileQ4_0>, quant_dot_as_tile<TileQ4_1>, quant_dot_as_tile<TileQ5_0>,
    quant_dot_as_tile<TileQ5_1>, quant_dot_as_tile<TileQ8_0>, dot_f32_avx2, dot_f16_avx2,
    quant_tile<TileQ4_0>, quant_tile<TileQ4_1>, quant_tile<TileQ5_0>, quant_tile<TileQ5_1>, quant_tile<TileQ8_0>,
    quant_dot_as_tile<TileQ4_K>, quant_dot_as_tile<TileQ5_K>, quant_dot_as_tile<TileQ6_K>,
    quant_tile<TileQ4_K>, quant_tile<TileQ5_K>, quant_tile<TileQ6_K>,
    packed_tile<SumsQ4_1<DotMaddubs>, 4>, packed_tile<SumsQ8_0Maddubs, 4>,
    packed_tile<SumsQ4_K<DotMaddubs>, 4>, packed_tile<SumsQ6_KMaddubs, 4>,
    packed_tile<SumsQ5_0Maddubs, 4>};

}  // namespace mpkv

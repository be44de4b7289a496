// AVX-512 (F + BW + VL + DQ) kernels: activation quantization and the float dots use 512-bit
// registers. The integer-dot types use the shared 256-bit tile kernel (matvec_tile_x86.h): its
// per-row-pair arithmetic is what makes results independent of batch and thread split, and a
// 512-bit tile (two blocks per step) would need its own fixed pair order; not done (not testable on
// the AVX2 machine this was written on).
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*() (a known
// false positive, GCC bug 105593); the code here reads no uninitialized value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed_kquant_x86.h"
#include "matvec/matvec_packed_q5_0_x86.h"
#include "matvec/matvec_packed_x86.h"
#include "matvec/matvec_tile_kquant_x86.h"
#include "matvec/matvec_tile_x86.h"

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
    Isa::avx512, "avx512", quantize_act_avx512,
    quant_dot_as_tile<TileQ4_0>, quant_dot_as_tile<TileQ4_1>, quant_dot_as_tile<TileQ5_0>,
    quant_dot_as_tile<TileQ5_1>, quant_dot_as_tile<TileQ8_0>, dot_f32_avx512, dot_f16_avx512,
    quant_tile<TileQ4_0>, quant_tile<TileQ4_1>, quant_tile<TileQ5_0>, quant_tile<TileQ5_1>, quant_tile<TileQ8_0>,
    quant_dot_as_tile<TileQ4_K>, quant_dot_as_tile<TileQ5_K>, quant_dot_as_tile<TileQ6_K>,
    quant_tile<TileQ4_K>, quant_tile<TileQ5_K>, quant_tile<TileQ6_K>,
    packed_tile<SumsQ4_1<DotMaddubs>, 4>, packed_tile<SumsQ8_0Maddubs, 4>,
    packed_tile<SumsQ4_K<DotMaddubs>, 4>, packed_tile<SumsQ6_KMaddubs, 4>,
    packed_tile<SumsQ5_0Maddubs, 4>};

}  // namespace mpkv

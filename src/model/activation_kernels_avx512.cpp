// The SiLU gate on 16 lanes: activation_kernels.h's fixed chain, the same operations as
// silu_mul_ref, so the same bits; the last n % 16 elements go through silu_mul_avx2.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*() (GCC
// bug 105593, as in matvec_avx512.cpp); the code here reads no uninitialized value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "model/activation_kernels.h"

namespace mpkv {

void silu_mul_avx512(float* gate, const float* up, int64_t n) {
  using C = SiluExpConst;
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 lo = _mm512_set1_ps(C::kLo), hi = _mm512_set1_ps(C::kHi), one = _mm512_set1_ps(1.0f);
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    __m512 x = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign));
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const __m512 nf = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(C::kLog2e)), kRound);
    __m512 r = _mm512_fmadd_ps(nf, _mm512_set1_ps(-C::kLn2Hi), x);
    r = _mm512_fmadd_ps(nf, _mm512_set1_ps(-C::kLn2Lo), r);
    __m512 p = _mm512_set1_ps(C::kC[0]);
    for (int k = 1; k < 6; ++k) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::kC[k]));
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    const __m512i e = _mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(_mm512_cvtps_epi32(nf), 23));
    const __m512 den = _mm512_add_ps(one, _mm512_castsi512_ps(e));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, den), _mm512_loadu_ps(up + i)));
  }
  silu_mul_avx2(gate + i, up + i, n - i);
}

}  // namespace mpkv

// The SiLU gate on 8 lanes: activation_kernels.h's fixed chain with vfmadd / vroundps, the same
// operations as silu_mul_ref, so the same bits; the last n % 8 elements go through silu_mul_ref.
#include <immintrin.h>

#include "model/activation_kernels.h"

namespace mpkv {

void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  using C = SiluExpConst;
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 lo = _mm256_set1_ps(C::kLo), hi = _mm256_set1_ps(C::kHi), one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    __m256 x = _mm256_xor_ps(g, sign);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 nf = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(C::kLog2e)), kRound);
    __m256 r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-C::kLn2Hi), x);
    r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-C::kLn2Lo), r);
    __m256 p = _mm256_set1_ps(C::kC[0]);
    for (int k = 1; k < 6; ++k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C::kC[k]));
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_fmadd_ps(p, r, one);
    const __m256i e = _mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_cvtps_epi32(nf), 23));
    const __m256 den = _mm256_add_ps(one, _mm256_castsi256_ps(e));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, den), _mm256_loadu_ps(up + i)));
  }
  silu_mul_ref(gate + i, up + i, n - i);
}

}  // namespace mpkv

// AVX2 + FMA sampler kernels (sampler_kernels.h): 8 logits per step, exp in 4-lane doubles.
#include <immintrin.h>

#include <cmath>

#include "engine/sampler_exp_x86.h"
#include "engine/sampler_kernels.h"

namespace mpkv {
namespace {  // internal linkage: AVX2 code must never be merged with other copies

using namespace sampler_exp;

__m256d exp_pd(__m256d x) {
  x = _mm256_max_pd(x, _mm256_set1_pd(kLowest));  // NaN x: returns kLowest (weight 0)
  const __m256d k = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Lo), r);
  __m256d p = _mm256_set1_pd(kInvFactorial[11]);
  for (int j = 10; j >= 0; --j) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFactorial[j]));
  // 2^k for k in [-289, 0]: the exponent field, built directly
  const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k)), _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}

// x = fl((l - mx) / T) without a division: the double product (l - mx) * (1 / T) is within 2^-52
// relative of the quotient, which is never within 2^-49 of a float rounding midpoint (a quotient of
// two 24-bit significands), so rounding the product to float gives the quotient's float exactly.
__m256d argument(__m128 diff, __m256d inv_t) {
  return _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(diff), inv_t)));
}

// 8 weights of the differences d = l - mx, stored as floats; their float values summed into acc.
void weights8(__m256 d, __m256d inv_t, float* w, __m256d& acc) {
  const __m128 lo = _mm256_cvtpd_ps(exp_pd(argument(_mm256_castps256_ps128(d), inv_t)));
  const __m128 hi = _mm256_cvtpd_ps(exp_pd(argument(_mm256_extractf128_ps(d, 1), inv_t)));
  _mm256_storeu_ps(w, _mm256_set_m128(hi, lo));
  acc = _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(lo), _mm256_cvtps_pd(hi)));
}

float hmax(__m256 m) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

}  // namespace

float sampler_max_avx2(const float* x, int n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);  // NaN x: keeps m
  float r = hmax(m);
  for (; i < n; ++i)
    if (x[i] > r) r = x[i];
  return r;
}

int32_t sampler_argmax_avx2(const float* x, int n) {
  if (std::isnan(x[0])) return 0;
  const float m = sampler_max_avx2(x, n);
  const __m256 mv = _mm256_set1_ps(m);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
    if (bits) return i + __builtin_ctz((unsigned)bits);
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

double sampler_exp_weights_avx2(const float* l, int n, float mx, float temperature, float* w) {
  const __m256 mv = _mm256_set1_ps(mx);
  const __m256d inv_t = _mm256_set1_pd(1.0 / (double)temperature);
  __m256d acc = _mm256_setzero_pd();
  int i = 0;
  for (; i + 8 <= n; i += 8) weights8(_mm256_sub_ps(_mm256_loadu_ps(l + i), mv), inv_t, w + i, acc);
  if (i < n) {  // tail padded with -inf (weight 0)
    alignas(32) float t[8], tw[8];
    for (int k = 0; k < 8; ++k) t[k] = i + k < n ? l[i + k] : -INFINITY;
    weights8(_mm256_sub_ps(_mm256_load_ps(t), mv), inv_t, tw, acc);
    for (int k = 0; i + k < n; ++k) w[i + k] = tw[k];
  }
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

int sampler_select_range_avx2(const float* l, int n, float lo, float hi, int32_t* out) {
  const __m256 lov = _mm256_set1_ps(lo), hiv = _mm256_set1_ps(hi);
  int c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(l + i);
    unsigned bits = (unsigned)_mm256_movemask_ps(
        _mm256_and_ps(_mm256_cmp_ps(x, lov, _CMP_GE_OQ), _mm256_cmp_ps(x, hiv, _CMP_LT_OQ)));
    for (; bits; bits &= bits - 1) out[c++] = i + __builtin_ctz(bits);
  }
  for (; i < n; ++i)
    if (l[i] >= lo && l[i] < hi) out[c++] = i;
  return c;
}

}  // namespace mpkv

// AVX-512 sampler kernels (sampler_kernels.h): 16 logits per step with masked tails, exp in
// 8-lane doubles (vscalefpd for 2^k), ids of selected logits by compress-store.
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports as a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>

#include "engine/sampler_exp_x86.h"
#include "engine/sampler_kernels.h"

namespace mpkv {
namespace {  // internal linkage: AVX-512 code must never be merged with other copies

using namespace sampler_exp;

__m512d exp_pd(__m512d x) {
  x = _mm512_max_pd(x, _mm512_set1_pd(kLowest));  // NaN x: returns kLowest (weight 0)
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kInvFactorial[11]);
  for (int j = 10; j >= 0; --j) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvFactorial[j]));
  return _mm512_scalef_pd(p, k);
}

__mmask16 tail_mask(int left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u); }

}  // namespace

float sampler_max_avx512(const float* x, int n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int i = 0; i < n; i += 16)  // NaN x: keeps m
    m = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(n - i), x + i), m);
  return _mm512_reduce_max_ps(m);
}

int32_t sampler_argmax_avx512(const float* x, int n) {
  if (std::isnan(x[0])) return 0;
  const __m512 mv = _mm512_set1_ps(sampler_max_avx512(x, n));
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const unsigned bits = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), mv, _CMP_EQ_OQ);
    if (bits) return i + __builtin_ctz(bits);
  }
  return 0;
}

// x = fl((l - mx) / T) without a division: the double product (l - mx) * (1 / T) is within 2^-52
// relative of the quotient, which is never within 2^-49 of a float rounding midpoint (a quotient of
// two 24-bit significands), so rounding the product to float gives the quotient's float exactly.
static __m512d argument(__m256 diff, __m512d inv_t) {
  return _mm512_cvtps_pd(_mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(diff), inv_t)));
}

double sampler_exp_weights_avx512(const float* l, int n, float mx, float temperature, float* w) {
  const __m512 mv = _mm512_set1_ps(mx);
  const __m512d inv_t = _mm512_set1_pd(1.0 / (double)temperature);
  __m512d acc = _mm512_setzero_pd();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);  // padding: -inf, weight 0
    const __m512 d = _mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, l + i), mv);
    const __m256 lo = _mm512_cvtpd_ps(exp_pd(argument(_mm512_castps512_ps256(d), inv_t)));
    const __m256 hi = _mm512_cvtpd_ps(exp_pd(argument(_mm512_extractf32x8_ps(d, 1), inv_t)));
    _mm512_mask_storeu_ps(w + i, k, _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
    acc = _mm512_add_pd(acc, _mm512_add_pd(_mm512_cvtps_pd(lo), _mm512_cvtps_pd(hi)));
  }
  return _mm512_reduce_add_pd(acc);
}

int sampler_select_range_avx512(const float* l, int n, float lo, float hi, int32_t* out) {
  const __m512 lov = _mm512_set1_ps(lo), hiv = _mm512_set1_ps(hi);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int c = 0;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(k, l + i);
    const __mmask16 in = _mm512_mask_cmp_ps_mask(_mm512_mask_cmp_ps_mask(k, x, lov, _CMP_GE_OQ), x, hiv, _CMP_LT_OQ);
    if (in) {
      _mm512_mask_compressstoreu_epi32(out + c, in, idx);
      c += __builtin_popcount(in);
    }
    idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
  }
  return c;
}

}  // namespace mpkv

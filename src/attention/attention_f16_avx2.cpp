// AVX2 variant of attend_f16_partial_ref (same two-pass algorithm, 8 lanes, F16C conversions).
// head_dim must be a multiple of 8; other sizes fall back to the reference.
#include <immintrin.h>

#include <cmath>

#include "attention/attention_f16.h"

namespace mpkv {

namespace {
#define LOAD_H(P) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(P)))
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
}  // namespace

void attend_f16_partial_avx2(const float* q, int group, int head_dim, const uint16_t* k, const uint16_t* v,
                            size_t row_stride, int t0, int t1, float scale, float* scratch, SoftmaxPartialView out) {
  if (head_dim % 8 != 0 || group > 16) {
    attend_f16_partial_ref(q, group, head_dim, k, v, row_stride, t0, t1, scale, scratch, out);
    return;
  }
  const int n = t1 - t0;
  // Pass 1: scores. Each K row is loaded once per 8 channels and used by every query head.
  float mx[16];
  for (int g = 0; g < group; ++g) mx[g] = -INFINITY;
  for (int t = 0; t < n; ++t) {
    const uint16_t* kr = k + (size_t)(t0 + t) * row_stride;
    for (int g = 0; g < group; ++g) {
      const float* qg = q + (size_t)g * head_dim;
      __m256 ACC = _mm256_setzero_ps();
      for (int d = 0; d < head_dim; d += 8) ACC = _mm256_fmadd_ps(_mm256_loadu_ps(qg + d), LOAD_H(kr + d), ACC);
      const float s = hsum256(ACC) * scale;
      scratch[(size_t)g * n + t] = s;
      mx[g] = std::max(mx[g], s);
    }
  }
  // Softmax numerators.
  for (int g = 0; g < group; ++g) {
    float* s = scratch + (size_t)g * n;
    float l = 0.0f;
    for (int t = 0; t < n; ++t) {
      s[t] = std::exp(s[t] - mx[g]);
      l += s[t];
    }
    out.m[g] = mx[g];
    out.l[g] = l;
  }
  // Pass 2: weighted sum of V rows.
  for (int g = 0; g < group; ++g) {
    float* acc = out.acc + (size_t)g * head_dim;
    for (int d = 0; d < head_dim; ++d) acc[d] = 0.0f;
  }
  for (int t = 0; t < n; ++t) {
    const uint16_t* vr = v + (size_t)(t0 + t) * row_stride;
    for (int d = 0; d < head_dim; d += 8) {
      const __m256 vv = LOAD_H(vr + d);
      for (int g = 0; g < group; ++g) {
        float* acc = out.acc + (size_t)g * head_dim + d;
        _mm256_storeu_ps(acc, _mm256_fmadd_ps(_mm256_set1_ps(scratch[(size_t)g * n + t]), vv, _mm256_loadu_ps(acc)));
      }
    }
  }
}

}  // namespace mpkv

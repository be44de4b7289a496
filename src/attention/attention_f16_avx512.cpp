// AVX512 variant of attend_f16_partial_ref (same two-pass algorithm, 16 lanes, F16C conversions).
// head_dim must be a multiple of 16; other sizes fall back to the reference.
#include <immintrin.h>

#include <cmath>

#include "attention/attention_f16.h"

namespace mpkv {

namespace {
#define LOAD_H(P) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(P)))
}  // namespace

void attend_f16_partial_avx512(const float* q, int group, int head_dim, const uint16_t* k, const uint16_t* v,
                            size_t row_stride, int t0, int t1, float scale, float* scratch, SoftmaxPartialView out) {
  if (head_dim % 16 != 0 || group > 16) {
    attend_f16_partial_ref(q, group, head_dim, k, v, row_stride, t0, t1, scale, scratch, out);
    return;
  }
  const int n = t1 - t0;
  // Pass 1: scores. Each K row is loaded once per 16 channels and used by every query head.
  float mx[16];
  for (int g = 0; g < group; ++g) mx[g] = -INFINITY;
  for (int t = 0; t < n; ++t) {
    const uint16_t* kr = k + (size_t)(t0 + t) * row_stride;
    for (int g = 0; g < group; ++g) {
      const float* qg = q + (size_t)g * head_dim;
      __m512 ACC = _mm512_setzero_ps();
      for (int d = 0; d < head_dim; d += 16) ACC = _mm512_fmadd_ps(_mm512_loadu_ps(qg + d), LOAD_H(kr + d), ACC);
      const float s = _mm512_reduce_add_ps(ACC) * scale;
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
    for (int d = 0; d < head_dim; d += 16) {
      const __m512 vv = LOAD_H(vr + d);
      for (int g = 0; g < group; ++g) {
        float* acc = out.acc + (size_t)g * head_dim + d;
        _mm512_storeu_ps(acc, _mm512_fmadd_ps(_mm512_set1_ps(scratch[(size_t)g * n + t]), vv, _mm512_loadu_ps(acc)));
      }
    }
  }
}

}  // namespace mpkv

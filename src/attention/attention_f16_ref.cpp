// Scalar reference: two passes over the rows (scores, then the weighted sum of values).
#include <cmath>

#include "attention/attention_f16.h"
#include "util/fp16.h"

namespace mpkv {

void attend_f16_partial_ref(const float* q, int group, int head_dim, const uint16_t* k, const uint16_t* v,
                            size_t row_stride, int t0, int t1, float scale, float* scratch, SoftmaxPartialView out) {
  const int n = t1 - t0;
  for (int g = 0; g < group; ++g) {
    const float* qg = q + (size_t)g * head_dim;
    float* s = scratch + (size_t)g * n;
    float m = -INFINITY;
    for (int t = 0; t < n; ++t) {
      const uint16_t* kr = k + (size_t)(t0 + t) * row_stride;
      float dot = 0.0f;
      for (int d = 0; d < head_dim; ++d) dot += qg[d] * fp16_to_fp32(kr[d]);
      s[t] = dot * scale;
      m = std::max(m, s[t]);
    }
    float l = 0.0f;
    for (int t = 0; t < n; ++t) {
      s[t] = std::exp(s[t] - m);
      l += s[t];
    }
    float* acc = out.acc + (size_t)g * head_dim;
    for (int d = 0; d < head_dim; ++d) acc[d] = 0.0f;
    for (int t = 0; t < n; ++t) {
      const uint16_t* vr = v + (size_t)(t0 + t) * row_stride;
      for (int d = 0; d < head_dim; ++d) acc[d] += s[t] * fp16_to_fp32(vr[d]);
    }
    out.m[g] = m;
    out.l[g] = l;
  }
}

}  // namespace mpkv

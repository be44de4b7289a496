// Scalar references of the sampler kernels (sampler_kernels.h): the loops the sampler ran before
// it had SIMD tiers.
#include <cmath>

#include "engine/sampler_kernels.h"

namespace mpkv {

int32_t sampler_argmax_ref(const float* x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

float sampler_max_ref(const float* x, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (x[i] > m) m = x[i];
  return m;
}

double sampler_exp_weights_ref(const float* l, int n, float mx, float temperature, float* w) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    const float x = (l[i] - mx) / temperature;
    w[i] = std::isnan(x) ? 0.0f : std::exp(x);
    sum += w[i];
  }
  return sum;
}

int sampler_select_range_ref(const float* l, int n, float lo, float hi, int32_t* out) {
  int c = 0;
  for (int i = 0; i < n; ++i)
    if (l[i] >= lo && l[i] < hi) out[c++] = i;
  return c;
}

}  // namespace mpkv

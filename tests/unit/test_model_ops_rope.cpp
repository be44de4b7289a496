// rope_forward_qk (src/model/ops.h): the fused query + key rotation gives, bit for bit, what
// rotating the queries and the keys in separate calls gives (one pool job and one cos/sin per
// angle instead of two), for both pair styles, below and above the row count that splits into
// pool chunks, and 1 / 2 threads, with and without per-pair frequency factors (rope_freqs.weight);
// and both match the rotation computed here in double.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/ops.h"

namespace mpkv {
namespace {

std::vector<float> randoms(std::mt19937& g, size_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(g);
  return v;
}

// x [n, heads, hd] rotated in double: pair j of token i by pos[i] * ps / rs * base^(-2j / hd) / ff[j]
// (ff empty: 1), llama.cpp's ggml_rope_ext with freq_factors (docs/models.md, "RoPE").
std::vector<double> rotated(const std::vector<float>& x, const std::vector<int>& pos, int heads, int hd, RopeStyle st,
                            float base, float rs, float ps, const std::vector<float>& ff) {
  std::vector<double> y(x.begin(), x.end());
  for (size_t i = 0; i < pos.size(); ++i)
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < hd / 2; ++j) {
        const double t = (double)pos[i] * ps / rs * std::pow((double)base, -2.0 * j / hd) / (ff.empty() ? 1.0 : ff[j]);
        const size_t o = (i * heads + h) * hd;
        const size_t a = o + (st == RopeStyle::adjacent ? 2 * j : j), b = o + (st == RopeStyle::adjacent ? 2 * j + 1 : j + hd / 2);
        y[a] = x[a] * std::cos(t) - x[b] * std::sin(t);
        y[b] = x[a] * std::sin(t) + x[b] * std::cos(t);
      }
  return y;
}

TEST(RopeForwardQk, EqualsSeparateCallsAndTheDoubleRotation) {
  std::mt19937 g(5);
  const int hq = 9, hk = 3, hd = 64;
  // Factors in [1, 4] on every pair, fast ones too (Llama 3.1's are 1 there), so every angle moves;
  // none below 1, which would push the largest angle past what float rounding keeps within 2e-5.
  std::vector<float> factors(hd / 2);
  for (int j = 0; j < hd / 2; ++j) factors[j] = 1.0f + 0.25f * (float)((j * 7 + 3) % 13);
  for (const std::vector<float>& ff : {std::vector<float>{}, factors})
    for (RopeStyle st : {RopeStyle::adjacent, RopeStyle::neox})
      for (int n : {1, 4, 5, 9, 16})
        for (int threads : {1, 2}) {
          const RopeParams rope{st, 10000.0f, 2.0f, ff.empty() ? nullptr : ff.data()};
          omp_set_num_threads(threads);
          std::vector<int> pos(n);
          for (int i = 0; i < n; ++i) pos[i] = 3 + 37 * i;
          const std::vector<float> q0 = randoms(g, (size_t)n * hq * hd), k0 = randoms(g, (size_t)n * hk * hd);
          std::vector<float> q = q0, k = k0, qs = q0, ks = k0;
          rope_forward_qk(q.data(), hq, k.data(), hk, pos.data(), n, hd, rope, 0.5f);
          rope_forward(qs.data(), pos.data(), n, hq, hd, rope, 0.5f);
          rope_forward(ks.data(), pos.data(), n, hk, hd, rope, 0.5f);
          ASSERT_EQ(std::memcmp(q.data(), qs.data(), q.size() * 4), 0) << "n " << n;
          ASSERT_EQ(std::memcmp(k.data(), ks.data(), k.size() * 4), 0) << "n " << n;
          const std::vector<double> qd = rotated(q0, pos, hq, hd, st, 10000.0f, 2.0f, 0.5f, ff);
          const std::vector<double> kd = rotated(k0, pos, hk, hd, st, 10000.0f, 2.0f, 0.5f, ff);
          for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q[i], qd[i], 2e-5) << i << (ff.empty() ? "" : " with factors");
          for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k[i], kd[i], 2e-5) << i;
        }
  omp_set_num_threads(1);
}

}  // namespace
}  // namespace mpkv

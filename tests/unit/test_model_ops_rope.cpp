// rope_forward_qk (src/model/ops.h): the fused query + key rotation gives, bit for bit, what
// rotating the queries and the keys in separate calls gives (one pool job and one cos/sin per
// angle instead of two), for both pair styles, below and above the row count that splits into
// pool chunks, and 1 / 2 threads, with and without per-pair frequency factors (rope_freqs.weight);
// and both match the rotation computed here in double; so does YaRN's (mixed angles, scaled cos / sin).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/ops.h"
#include "support/rope_reference.h"

namespace mpkv {
namespace {

std::vector<float> randoms(std::mt19937& g, size_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(g);
  return v;
}

// x [n, heads, hd] rotated in double by test::rope_reference (docs/models.md, "RoPE"), token i at
// position pos[i] * ps.
std::vector<double> rotated(const std::vector<float>& x, const std::vector<int>& pos, int heads, int hd, double ps,
                            const test::RefRope& r) {
  std::vector<double> y(x.begin(), x.end());
  for (size_t i = 0; i < pos.size(); ++i) test::rope_reference(y.data() + i * heads * hd, heads, hd, pos[i] * ps, r);
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
          const test::RefRope rr{st == RopeStyle::adjacent, 10000.0, 2.0, std::vector<double>(ff.begin(), ff.end())};
          const std::vector<double> qd = rotated(q0, pos, hq, hd, 0.5, rr);
          const std::vector<double> kd = rotated(k0, pos, hk, hd, 0.5, rr);
          for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q[i], qd[i], 2e-5) << i << (ff.empty() ? "" : " with factors");
          for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k[i], kd[i], 2e-5) << i;
        }
  omp_set_num_threads(1);
}

// YaRN (docs/models.md, "YaRN"): with n_ctx_orig 4096, base 1e4, head_dim 64, beta 32 / 1 the
// correction dims are floor(10.47) = 10 and ceil(22.5) = 23, away from the integers, so float and
// double agree on them.
TEST(RopeForwardQk, YarnMatchesTheDoubleRotation) {
  std::mt19937 g(7);
  const int hq = 4, hk = 2, hd = 64, n = 16;
  RopeYarn yarn;
  yarn.ext_factor = 1.0f;
  yarn.n_ctx_orig = 4096;
  for (RopeStyle st : {RopeStyle::adjacent, RopeStyle::neox}) {
    const RopeParams rope{st, 10000.0f, 4.0f, nullptr, yarn, 0.9f};
    std::vector<int> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = 3 + 37 * i;
    const std::vector<float> q0 = randoms(g, (size_t)n * hq * hd), k0 = randoms(g, (size_t)n * hk * hd);
    std::vector<float> q = q0, k = k0;
    rope_forward_qk(q.data(), hq, k.data(), hk, pos.data(), n, hd, rope, 0.5f);
    const test::RefRope rr{st == RopeStyle::adjacent, 10000.0, 4.0, {}, 4096, 0.9};
    const std::vector<double> qd = rotated(q0, pos, hq, hd, 0.5, rr);
    const std::vector<double> kd = rotated(k0, pos, hk, hd, 0.5, rr);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(q[i], qd[i], 5e-5) << i;
    for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(k[i], kd[i], 5e-5) << i;
    // Plain linear scaling (the same scale, no mix, no mscale) is far from it: the check can fail.
    std::vector<float> ql = q0;
    rope_forward_qk(ql.data(), hq, nullptr, 0, pos.data(), n, hd, RopeParams{st, 10000.0f, 4.0f}, 0.5f);
    double far = 0;
    for (size_t i = 0; i < q.size(); ++i) far = std::max(far, std::fabs(ql[i] - qd[i]));
    EXPECT_GT(far, 0.1);
  }
}

}  // namespace
}  // namespace mpkv

// The fp16 attention partial kernel: scalar reference against a double-precision softmax
// attention, every SIMD variant against the reference, and merged partials against one pass.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/attention_f16.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

// The reference accumulates in float32 over up to ~2000 rows; outputs are O(1).
constexpr double kRefVsDoubleAbs = 2e-5;
// SIMD variants differ from the reference only by summation order (8/16-lane partial sums).
constexpr double kSimdVsRefAbs = 1e-5;

struct Case {
  int group, hd, n;
  size_t stride;
  std::vector<float> q;
  std::vector<uint16_t> k, v;
};

Case make_case(int group, int hd, int n, int n_kv_heads, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  Case c{group, hd, n, (size_t)n_kv_heads * hd, {}, {}, {}};
  c.q.resize((size_t)group * hd);
  for (auto& x : c.q) x = nd(rng);
  c.k.resize(c.stride * n);
  c.v.resize(c.stride * n);
  for (auto& x : c.k) x = fp32_to_fp16(nd(rng));
  for (auto& x : c.v) x = fp32_to_fp16(nd(rng));
  return c;
}

std::vector<double> exact(const Case& c, int t0, int t1, float scale) {
  std::vector<double> out((size_t)c.group * c.hd, 0.0);
  for (int g = 0; g < c.group; ++g) {
    std::vector<double> s(t1 - t0);
    double mx = -1e300;
    for (int t = t0; t < t1; ++t) {
      double d = 0;
      for (int i = 0; i < c.hd; ++i) d += (double)c.q[g * c.hd + i] * fp16_to_fp32(c.k[t * c.stride + i]);
      s[t - t0] = d * scale;
      mx = std::max(mx, s[t - t0]);
    }
    double z = 0;
    for (auto& e : s) z += (e = std::exp(e - mx));
    for (int t = t0; t < t1; ++t)
      for (int i = 0; i < c.hd; ++i) out[g * c.hd + i] += s[t - t0] / z * fp16_to_fp32(c.v[t * c.stride + i]);
  }
  return out;
}

std::vector<float> run(AttendF16PartialFn fn, const Case& c, int t0, int t1, float scale) {
  std::vector<float> m(c.group), l(c.group), acc((size_t)c.group * c.hd), out(acc.size()), scratch((size_t)c.group * (t1 - t0));
  fn(c.q.data(), c.group, c.hd, c.k.data(), c.v.data(), c.stride, t0, t1, scale, scratch.data(), {m.data(), l.data(), acc.data()});
  softmax_partial_finish({m.data(), l.data(), acc.data()}, c.group, c.hd, out.data());
  return out;
}

TEST(AttentionF16, ReferenceMatchesDoublePrecision) {
  for (int n : {1, 7, 300, 2000}) {
    const Case c = make_case(3, 64, n, 3, n);
    const float scale = 1.0f / 8.0f;
    const auto want = exact(c, 0, n, scale);
    const auto got = run(attend_f16_partial_ref, c, 0, n, scale);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], kRefVsDoubleAbs) << "n=" << n << " i=" << i;
  }
}

TEST(AttentionF16, SimdVariantsMatchReference) {
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if ((int)best_isa() < (int)isa) {
      std::printf("skipping %s: CPU lacks it\n", isa_name(isa));
      continue;
    }
    for (int hd : {64, 128, 48}) {
      for (int group : {1, 3, 8}) {
        const Case c = make_case(group, hd, 513, 2, hd * 31 + group);
        const auto want = run(attend_f16_partial_ref, c, 5, 513, 0.125f);
        const auto got = run(attend_f16_partial_for(isa), c, 5, 513, 0.125f);
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], kSimdVsRefAbs) << isa_name(isa) << " hd=" << hd;
      }
    }
  }
}

TEST(AttentionF16, MergedPartialsEqualOnePass) {
  const Case c = make_case(3, 64, 1000, 3, 9);
  const float scale = 0.125f;
  const auto want = exact(c, 0, 1000, scale);
  const int g = c.group, hd = c.hd;
  std::vector<float> m1(g), l1(g), a1(g * hd), m2(g), l2(g), a2(g * hd), scratch(g * 1000), out(g * hd);
  attend_f16_partial_ref(c.q.data(), g, hd, c.k.data(), c.v.data(), c.stride, 0, 377, scale, scratch.data(), {m1.data(), l1.data(), a1.data()});
  attend_f16_partial_ref(c.q.data(), g, hd, c.k.data(), c.v.data(), c.stride, 377, 1000, scale, scratch.data(), {m2.data(), l2.data(), a2.data()});
  softmax_partial_merge({m1.data(), l1.data(), a1.data()}, {m2.data(), l2.data(), a2.data()}, g, hd);
  softmax_partial_finish({m1.data(), l1.data(), a1.data()}, g, hd, out.data());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], kRefVsDoubleAbs);
}

}  // namespace
}  // namespace mpkv

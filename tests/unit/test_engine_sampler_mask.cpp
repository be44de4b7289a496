// The grammar's mask in the sampler (engine/sampler.h, step 0): masked tokens are never drawn,
// greedy or sampled, whatever the penalties, the logit bias and the cuts would otherwise keep; an
// empty mask is a broken invariant.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/sampler.h"
#include "util/error.h"

namespace mpkv {
namespace {

constexpr int kVocab = 1000;  // not a multiple of 32: the last mask word is partial

std::vector<uint32_t> mask_of(const std::set<int32_t>& allowed) {
  std::vector<uint32_t> m((kVocab + 31) / 32, 0u);
  for (int32_t t : allowed) m[t / 32] |= 1u << (t % 32);
  return m;
}

std::vector<float> logits(uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> l(kVocab);
  for (float& x : l) x = d(g);
  return l;
}

TEST(SamplerMask, GreedyTakesTheBestAllowedToken) {
  std::vector<float> l = logits(1);
  l[5] = 100.0f;  // the unmasked argmax
  const std::set<int32_t> allowed = {17, 400, 999};
  int32_t best = 17;
  for (int32_t t : allowed)
    if (l[t] > l[best]) best = t;
  SamplerOptions o;
  o.temperature = 0.0f;
  Sampler s(o);
  EXPECT_EQ(s.sample(l.data(), kVocab), 5);
  const auto m = mask_of(allowed);
  EXPECT_EQ(s.sample(l.data(), kVocab, m.data()), best);
}

TEST(SamplerMask, SampledDrawsOnlyAllowedTokensUnderEveryAdjustment) {
  const std::set<int32_t> allowed = {3, 64, 65, 998, 999};
  const auto m = mask_of(allowed);
  for (int variant = 0; variant < 4; ++variant) {
    SamplerOptions o;
    o.temperature = 1.3f;
    o.top_k = variant == 0 ? 0 : (variant == 1 ? 2 : 40);  // no top-k, fewer than allowed, more
    o.top_p = variant == 3 ? 0.5f : 1.0f;
    o.min_p = variant == 2 ? 0.05f : 0.0f;
    o.repeat_penalty = 1.3f;
    o.presence_penalty = -2.0f;      // pushes generated (allowed) tokens up...
    o.logit_bias = {{7, 100.0f}};    // ...and a masked one up by as much as a bias can
    o.seed = 42 + variant;
    Sampler s(o);
    std::set<int32_t> drawn;
    for (int i = 0; i < 300; ++i) {
      const std::vector<float> l = logits(100 + i);
      const int32_t t = s.sample(l.data(), kVocab, m.data());
      ASSERT_TRUE(allowed.count(t)) << "variant " << variant << " drew masked token " << t;
      drawn.insert(t);
    }
    EXPECT_GE(drawn.size(), variant == 1 ? 2u : 3u) << "variant " << variant;
  }
}

TEST(SamplerMask, OneAllowedTokenIsAlwaysDrawn) {
  const auto m = mask_of({777});
  SamplerOptions o;
  o.temperature = 2.0f;
  o.top_k = 0;
  Sampler s(o);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = logits(i);
    l[777] = -50.0f;  // far below everything masked
    EXPECT_EQ(s.sample(l.data(), kVocab, m.data()), 777);
  }
}

TEST(SamplerMask, EmptyMaskIsABrokenInvariant) {
  const auto m = mask_of({});
  Sampler s(SamplerOptions{});
  const std::vector<float> l = logits(3);
  EXPECT_THROW(s.sample(l.data(), kVocab, m.data()), InternalError);
}

}  // namespace
}  // namespace mpkv

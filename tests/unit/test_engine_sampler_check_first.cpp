// Check-first sampling in the sampler (engine/sampler.h: check_first_exact, propose, commit;
// docs/structured_outputs.md, "Masks in the engine"): which options allow it (one test per branch),
// the proposal accepting nothing, greedy check-first equal to the masked argmax (ties and every
// adjustment included), and at temperature > 0 without cuts the distribution of check-first draws
// equal to the masked distribution, with a bound that two wrong fallbacks fail.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "engine/sampler.h"

namespace mpkv {
namespace {

std::vector<uint32_t> mask_of(const std::set<int32_t>& allowed, int n_vocab) {
  std::vector<uint32_t> m((n_vocab + 31) / 32, 0u);
  for (int32_t t : allowed) m[t / 32] |= 1u << (t % 32);
  return m;
}

bool in(const std::vector<uint32_t>& m, int32_t t) { return (m[t / 32] >> (t % 32)) & 1u; }

// What the engine does with a row (Engine::sample_check_first, then the masked sample when refused).
int32_t check_first(Sampler& s, const float* logits, int n_vocab, const std::vector<uint32_t>& mask) {
  const int32_t t = s.propose(logits, n_vocab);
  if (t >= 0 && in(mask, t)) {
    s.commit(t);
    return t;
  }
  return s.sample(logits, n_vocab, mask.data());
}

SamplerOptions temperature_only(float t) {
  SamplerOptions o;
  o.temperature = t;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.0f;
  return o;
}

TEST(SamplerCheckFirst, GreedyIsExactWhateverTheCuts) {
  SamplerOptions o;  // defaults: top_k 40, top_p 0.95
  o.temperature = 0.0f;
  o.min_p = 0.3f;
  o.repeat_penalty = 1.2f;
  o.logit_bias = {{3, 5.0f}};
  EXPECT_TRUE(check_first_exact(o));
}

TEST(SamplerCheckFirst, TemperatureWithoutCutsIsExact) { EXPECT_TRUE(check_first_exact(temperature_only(0.7f))); }

TEST(SamplerCheckFirst, TopKIsNotExact) {
  SamplerOptions o = temperature_only(0.7f);
  o.top_k = 40;
  EXPECT_FALSE(check_first_exact(o));
  o.top_k = 1 << 30;  // more than any vocabulary: still a top-k walk under a mask (sampler.h)
  EXPECT_FALSE(check_first_exact(o));
}

TEST(SamplerCheckFirst, TopPIsNotExact) {
  SamplerOptions o = temperature_only(0.7f);
  o.top_p = 0.95f;
  EXPECT_FALSE(check_first_exact(o));
}

TEST(SamplerCheckFirst, MinPIsNotExact) {
  SamplerOptions o = temperature_only(0.7f);
  o.min_p = 0.05f;
  EXPECT_FALSE(check_first_exact(o));
}

TEST(SamplerCheckFirst, DefaultsAreNotExact) { EXPECT_FALSE(check_first_exact(SamplerOptions{})); }

TEST(SamplerCheckFirst, ProposeRefusesOptionsThatAreNotExactAndNonFiniteLogits) {
  const std::vector<float> l = {0.5f, 2.0f, 1.0f, -1.0f};
  Sampler cut(SamplerOptions{});  // top-k and top-p on
  EXPECT_EQ(cut.propose(l.data(), 4), -1);
  Sampler t(temperature_only(1.0f));
  const float inf = INFINITY;
  const std::vector<float> all_minus_inf = {-inf, -inf, -inf, -inf};
  EXPECT_EQ(t.propose(all_minus_inf.data(), 4), -1);  // sample() would take the argmax
  const std::vector<float> plus_inf = {0.0f, inf, 1.0f, 2.0f};
  EXPECT_EQ(t.propose(plus_inf.data(), 4), -1);
  EXPECT_GE(t.propose(l.data(), 4), 0);
}

// A proposal is accepted into nothing: the penalties of later tokens are those of a sampler that
// never proposed.
TEST(SamplerCheckFirst, ProposeAcceptsNothingCommitAcceptsLikeSample) {
  SamplerOptions o;
  o.temperature = 0.0f;
  o.presence_penalty = 2.0f;
  o.repeat_penalty = 1.5f;
  const std::vector<float> l = {1.0f, 3.0f, 2.5f, 2.0f, 0.0f};
  Sampler a(o), b(o);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.propose(l.data(), 5), 1);
  EXPECT_EQ(a.sample(l.data(), 5), b.sample(l.data(), 5));
  EXPECT_EQ(a.sample(l.data(), 5), b.sample(l.data(), 5));  // 1 was penalized in both
  Sampler c(o), d(o);
  const int32_t t = c.propose(l.data(), 5);
  c.commit(t);
  EXPECT_EQ(t, d.sample(l.data(), 5));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.sample(l.data(), 5), d.sample(l.data(), 5)) << i;
}

// Greedy: check-first gives the masked argmax on every row, ties (logits on a coarse grid) and
// every adjustment included, with rows where the unmasked argmax is allowed and rows where it is not.
TEST(SamplerCheckFirst, GreedyEqualsTheMaskedArgmax) {
  constexpr int kVocab = 300;
  SamplerOptions o;
  o.temperature = 0.0f;
  o.repeat_penalty = 1.3f;
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.25f;
  o.logit_bias = {{7, 3.0f}, {200, -2.0f}};
  Sampler check(o), full(o);
  std::mt19937_64 g(5);
  std::uniform_int_distribution<int> grid(-8, 8);
  std::bernoulli_distribution keep(0.3);
  int allowed_argmax = 0, refused_argmax = 0;
  for (int row = 0; row < 2000; ++row) {
    std::vector<float> l(kVocab);
    for (float& x : l) x = 0.5f * (float)grid(g);  // many ties
    std::set<int32_t> allowed;
    for (int t = 0; t < kVocab; ++t)
      if (keep(g)) allowed.insert(t);
    if (row % 3 == 0) allowed.insert(argmax(l.data(), kVocab));  // often the raw argmax is allowed
    if (allowed.empty()) allowed.insert(row % kVocab);
    const auto m = mask_of(allowed, kVocab);
    const int32_t p = check.propose(l.data(), kVocab);
    (p >= 0 && in(m, p) ? allowed_argmax : refused_argmax)++;
    const int32_t t = p >= 0 && in(m, p) ? (check.commit(p), p) : check.sample(l.data(), kVocab, m.data());
    ASSERT_EQ(t, full.sample(l.data(), kVocab, m.data())) << "row " << row;
  }
  EXPECT_GT(allowed_argmax, 200);
  EXPECT_GT(refused_argmax, 200);
}

// Temperature only: N check-first draws from a fixed row under a fixed mask against the masked
// distribution p(t) / p(S). The statistic is Pearson's chi-square over the allowed tokens, plus the
// count of masked tokens drawn (must be 0). The bound is the chi-square quantile for 3 degrees of
// freedom at 1e-6. Wrong fallbacks for a refused proposal are checked to fail it: the best allowed
// token, the first allowed token after the drawn one, another unmasked draw kept whatever it is.
// (Drawing unmasked again until a token is allowed would be exact: rejection sampling.)
TEST(SamplerCheckFirst, TemperatureDrawsFollowTheMaskedDistribution) {
  constexpr int kVocab = 8;
  constexpr int kDraws = 60000;
  constexpr double kBound = 30.66;  // chi-square, 3 degrees of freedom, upper 1e-6 tail
  const std::vector<float> raw = {2.0f, 0.5f, 1.5f, -0.5f, 1.0f, 0.0f, 2.5f, 0.8f};
  const std::set<int32_t> allowed = {1, 3, 4, 7};
  const auto m = mask_of(allowed, kVocab);
  SamplerOptions o = temperature_only(0.8f);
  o.logit_bias = {{3, 0.7f}, {6, 1.0f}};  // an allowed and a masked token moved: the reference sees it
  std::vector<double> expected(kVocab, 0.0);
  double s = 0.0;
  for (int32_t t : allowed) {
    double x = raw[t];
    for (const auto& [id, b] : o.logit_bias)
      if (id == t) x += b;
    expected[t] = std::exp(x / o.temperature);
    s += expected[t];
  }
  for (double& e : expected) e /= s;

  auto chi_square = [&](const std::function<int32_t(Sampler&)>& draw, uint64_t seed, int& masked) {
    SamplerOptions so = o;
    so.seed = seed;
    Sampler smp(so);
    std::vector<int> count(kVocab, 0);
    masked = 0;
    for (int i = 0; i < kDraws; ++i) {
      const int32_t t = draw(smp);
      count[t]++;
      masked += !in(m, t);
    }
    double chi = 0.0;
    for (int32_t t : allowed) {
      const double e = expected[t] * kDraws;
      chi += (count[t] - e) * (count[t] - e) / e;
    }
    return chi;
  };
  const float* l = raw.data();
  int masked = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    const double chi = chi_square([&](Sampler& smp) { return check_first(smp, l, kVocab, m); }, seed, masked);
    EXPECT_LT(chi, kBound) << "seed " << seed;
    EXPECT_EQ(masked, 0);
  }
  // The masked path itself, for reference.
  EXPECT_LT(chi_square([&](Sampler& smp) { return smp.sample(l, kVocab, m.data()); }, 4, masked), kBound);
  // Wrong fallbacks for a refused proposal t; each must fail the bound.
  auto wrong = [&](const std::function<int32_t(int32_t)>& fallback, uint64_t seed) {
    return chi_square(
        [&](Sampler& smp) {
          const int32_t t = smp.propose(l, kVocab);
          const int32_t kept = in(m, t) ? t : fallback(t);
          smp.commit(kept);
          return kept;
        },
        seed, masked);
  };
  // The best allowed token (a greedy fallback).
  EXPECT_GT(wrong([&](int32_t) { return 4; }, 5), kBound);
  // The first allowed token at or after t in id order (a scan from the drawn token).
  EXPECT_GT(wrong([&](int32_t t) {
              while (!in(m, t)) t = (t + 1) % kVocab;
              return t;
            }, 6), kBound);
  // One more unmasked draw, kept whatever it is: draws masked tokens.
  SamplerOptions so = o;
  so.seed = 7;
  Sampler again(so);
  wrong([&](int32_t) { return again.propose(l, kVocab); }, 7);
  EXPECT_GT(masked, 0);
}

}  // namespace
}  // namespace mpkv

// Sampler against distributions computed by hand: top-p, min-p, the repetition penalty, and the
// defaults of the newer fields leaving sampling as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"
#include "util/error.h"

namespace mpkv {
namespace {

// Logits whose softmax at temperature 1 is exactly {0.5, 0.3, 0.15, 0.05}.
std::vector<float> four_way() { return {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)}; }

// Frequencies of each token over n draws.
std::vector<double> frequencies(SamplerOptions o, const std::vector<float>& logits, int n) {
  o.repeat_last_n = 0;  // independent draws
  Sampler s(o);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) f[s.sample(logits.data(), (int)logits.size())] += 1.0 / n;
  return f;
}

// 5 standard deviations of a frequency estimated from n draws.
double tol(double p, int n) { return 5.0 * std::sqrt(p * (1 - p) / n) + 1e-9; }

constexpr int kDraws = 40000;

TEST(Sampler, TopPKeepsTheShortestPrefixReachingP) {
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 0.7f;  // 0.5 < 0.7 <= 0.5 + 0.3: keep {0, 1}, renormalized to 0.625 / 0.375
  const auto f = frequencies(o, four_way(), kDraws);
  EXPECT_NEAR(f[0], 0.625, tol(0.625, kDraws));
  EXPECT_NEAR(f[1], 0.375, tol(0.375, kDraws));
  EXPECT_EQ(f[2] + f[3], 0.0);
}

TEST(Sampler, MinPKeepsTokensAboveAFractionOfTheMostLikely) {
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.25f;  // threshold 0.25 * 0.5 = 0.125: keep {0.5, 0.3, 0.15} -> 0.5/0.95, 0.3/0.95, 0.15/0.95
  const auto f = frequencies(o, four_way(), kDraws);
  EXPECT_NEAR(f[0], 0.5 / 0.95, tol(0.5 / 0.95, kDraws));
  EXPECT_NEAR(f[1], 0.3 / 0.95, tol(0.3 / 0.95, kDraws));
  EXPECT_NEAR(f[2], 0.15 / 0.95, tol(0.15 / 0.95, kDraws));
  EXPECT_EQ(f[3], 0.0);
  o.min_p = 0.7f;  // threshold 0.35: only token 0
  EXPECT_NEAR(frequencies(o, four_way(), 1000)[0], 1.0, 1e-9);
}

TEST(Sampler, TemperatureScalesBeforeTheCuts) {
  SamplerOptions o;
  o.temperature = 0.5f;  // p ~ p^2: {0.25, 0.09, 0.0225, 0.0025} / 0.365
  o.top_k = 0;
  o.top_p = 1.0f;
  const auto f = frequencies(o, four_way(), kDraws);
  const double z = 0.25 + 0.09 + 0.0225 + 0.0025;
  EXPECT_NEAR(f[0], 0.25 / z, tol(0.25 / z, kDraws));
  EXPECT_NEAR(f[1], 0.09 / z, tol(0.09 / z, kDraws));
  EXPECT_NEAR(f[2], 0.0225 / z, tol(0.0225 / z, kDraws));
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplerOptions o;
  o.temperature = 0.0f;
  o.repeat_penalty = 1.1f;
  {
    Sampler s(o);
    const std::vector<float> l{2.0f, 1.9f, -1.0f};
    s.accept(0);  // 2.0 / 1.1 = 1.818 < 1.9
    EXPECT_EQ(s.sample(l.data(), 3), 1);
  }
  {
    Sampler s(o);
    const std::vector<float> l{-1.0f, -1.05f};
    s.accept(0);  // -1.0 * 1.1 = -1.1 < -1.05
    EXPECT_EQ(s.sample(l.data(), 2), 1);
  }
  {
    // The sampled token enters the history: 0 (2.0 vs 1.9), then 1 (1.818 vs 1.9), then both are
    // penalized (1.818 vs 1.727): 0.
    Sampler s(o);
    const std::vector<float> l{2.0f, 1.9f};
    EXPECT_EQ(s.sample(l.data(), 2), 0);
    EXPECT_EQ(s.sample(l.data(), 2), 1);
    EXPECT_EQ(s.sample(l.data(), 2), 0);
  }
  {
    // A token older than repeat_last_n is no longer penalized; repeats count once.
    o.repeat_last_n = 2;
    Sampler s(o);
    const std::vector<float> l{2.0f, 1.9f, -5.0f};
    s.accept(0);
    s.accept(2);
    s.accept(2);
    EXPECT_EQ(s.sample(l.data(), 3), 0);
  }
}

TEST(Sampler, DefaultsOfTheNewFieldsChangeNothing) {
  SamplerOptions o;
  EXPECT_EQ(o.min_p, 0.0f);
  EXPECT_EQ(o.repeat_penalty, 1.0f);
  // Greedy on logits where a penalty would change the answer: the default does not.
  o.temperature = 0.0f;
  Sampler s(o);
  const std::vector<float> l{2.0f, 1.99f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(l.data(), 2), 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  SamplerOptions o;
  o.temperature = 0.0f;
  o.repeat_penalty = 1.0f;
  o.presence_penalty = 0.5f;
  {
    // Prompt tokens (accept) are not penalized: 0 wins at 2.0 vs 1.8.
    Sampler s(o);
    const std::vector<float> l{2.0f, 1.8f};
    s.accept(0);
    EXPECT_EQ(s.sample(l.data(), 2), 0);
    // Now 0 was generated once: 2.0 - 0.5 = 1.5 < 1.8, so 1; then both at -0.5: 1.5 vs 1.3 -> 0.
    EXPECT_EQ(s.sample(l.data(), 2), 1);
    EXPECT_EQ(s.sample(l.data(), 2), 0);
  }
  {
    // Frequency: c * 0.3 after c generations. 0: 2.0, 1.7, 1.4 ...; 1 at 1.5 stays until drawn.
    o.presence_penalty = 0.0f;
    o.frequency_penalty = 0.3f;
    Sampler s(o);
    const std::vector<float> l{2.0f, 1.5f};
    EXPECT_EQ(s.sample(l.data(), 2), 0);  // 2.0 vs 1.5
    EXPECT_EQ(s.sample(l.data(), 2), 0);  // 1.7 vs 1.5
    EXPECT_EQ(s.sample(l.data(), 2), 1);  // 1.4 vs 1.5
    EXPECT_EQ(s.sample(l.data(), 2), 0);  // 1.4 vs 1.2
  }
  {
    // A negative penalty encourages repeats.
    o.frequency_penalty = -1.0f;
    Sampler s(o);
    const std::vector<float> l{1.0f, 1.5f};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(s.sample(l.data(), 2), 1);
  }
}

TEST(Sampler, LogitBiasIsAddedBeforeGreedyAndSampling) {
  SamplerOptions o;
  o.temperature = 0.0f;
  o.logit_bias = {{2, 1.5f}, {0, -100.0f}, {7, 100.0f}};  // id 7 is past this vocabulary: ignored
  Sampler s(o);
  const std::vector<float> l{3.0f, 1.0f, 0.0f};
  EXPECT_EQ(s.sample(l.data(), 3), 2);  // 3 - 100, 1, 1.5
  // Sampling at temperature 1: a -100 bias makes the token practically impossible.
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.logit_bias = {{0, -100.0f}};
  Sampler t(o);
  for (int i = 0; i < 200; ++i) EXPECT_NE(t.sample(l.data(), 3), 0);
}

// Rows a broken model could produce: NaN logits are never drawn when sampling (they weigh 0 and sit
// after every level; greedy keeps the plain argmax loop's answer); a row with no finite maximum (all
// -inf, or +inf) falls back to the argmax. Every tier, every path (greedy, top-k, no top-k, min-p).
TEST(Sampler, NonFiniteLogitsGiveATokenInRange) {
  const float nan = std::nanf("");
  const std::vector<std::vector<float>> rows = {{nan, 1.0f, 0.5f, nan, -1.0f},
                                                {2.0f, nan, nan, nan, nan},
                                                {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY},
                                                {0.0f, INFINITY, 1.0f, -INFINITY, 3.0f}};
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (isa > best_isa()) continue;
    for (int top_k : {0, 2})
      for (float T : {0.0f, 1.0f})
        for (float min_p : {0.0f, 0.1f}) {
          SamplerOptions o;
          o.temperature = T;
          o.top_k = top_k;
          o.top_p = 0.9f;
          o.min_p = min_p;
          Sampler s(o, sampler_kernels_for(isa));
          for (const auto& l : rows)
            for (int i = 0; i < 20; ++i) {
              const int32_t t = s.sample(l.data(), (int)l.size());
              ASSERT_TRUE(t >= 0 && t < (int)l.size()) << isa_name(isa);
              if (T > 0.0f && (&l == &rows[0] || &l == &rows[1])) {
                EXPECT_FALSE(std::isnan(l[t])) << isa_name(isa) << " drew a NaN logit";
              }
            }
          EXPECT_EQ(s.sample(rows[3].data(), 5), 1);  // +inf: the argmax
        }
  }
}

TEST(Sampler, BadValuesAreErrors) {
  for (auto set : std::vector<void (*)(SamplerOptions&)>{
           [](SamplerOptions& o) { o.min_p = -0.1f; }, [](SamplerOptions& o) { o.min_p = 1.5f; },
           [](SamplerOptions& o) { o.repeat_penalty = 0.0f; }, [](SamplerOptions& o) { o.repeat_last_n = -1; },
           [](SamplerOptions& o) { o.top_p = 0.0f; }, [](SamplerOptions& o) { o.presence_penalty = 2.5f; },
           [](SamplerOptions& o) { o.frequency_penalty = -2.01f; },
           [](SamplerOptions& o) { o.logit_bias = {{-1, 1.0f}}; },
           [](SamplerOptions& o) { o.logit_bias = {{3, 100.5f}}; }}) {
    SamplerOptions o;
    set(o);
    EXPECT_THROW(Sampler{o}, Error);
  }
}

}  // namespace
}  // namespace mpkv

// Sensitivities from synthetic gradients: hand-computed PM-KVQ s_b and RateQuant w, monotonicity
// in bits, linearity in G, the smoothing identity and input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "calib/sensitivity.h"
#include "fixtures/model_config.h"
#include "util/error.h"

namespace mpkv::calib {
namespace {

KvGradients<float> zeros(const ModelConfig& c, int T) {
  KvGradients<float> g;
  g.n_tokens = T;
  for (auto* a : {&g.k, &g.v, &g.dk, &g.dv}) a->assign(c.n_layer, std::vector<float>((size_t)T * c.kv_dim(), 0.0f));
  return g;
}

SensitivityOptions options(int hd, std::vector<int> bits) {
  SensitivityOptions o;
  o.key.head_dim = o.value.head_dim = hd;
  o.bits = std::move(bits);
  return o;
}

// One token, head_dim 8, per-token 2-bit min-max: the row [0, 0.4, 3, 3, 3, 3, 3, 3] has
// Z = 0, S = (3 - 0) / 3 = 1 (exact in fp16), so 0.4 -> code 0 -> error 0.4 and every other entry
// is exact. With G = 2 at that entry, s_K(2) = 0.8. Values are all exact (error 0).
TEST(Sensitivity, HandComputedTwoBitCase) {
  const ModelConfig c = test::gqa2_config(1, 1, 8);
  KvGradients<float> g = zeros(c, 1);
  g.k[0] = {0, 0.4f, 3, 3, 3, 3, 3, 3};
  g.dk[0] = {1, 2, 1, 1, 1, 1, 1, 1};
  g.v[0] = {0, 1, 2, 3, 0, 1, 2, 3};  // on the 2-bit grid
  g.dv[0] = {5, 5, 5, 5, 5, 5, 5, 5};
  SensitivityAccumulator acc(c, options(8, {2}));
  acc.add(g);
  const SensitivityReport r = acc.report();
  EXPECT_NEAR(r.pmkvq_key[0][0][0], 0.8, 1e-6);
  EXPECT_NEAR(r.pmkvq_value[0][0][0], 0.0, 1e-9);
  EXPECT_NEAR(r.pmkvq_layer(0, 0), 0.8, 1e-6);
  // RateQuant w = (1/T) sum_t ||G_t||^2: keys 7 * 1 + 4 = 11, values 8 * 25 = 200.
  EXPECT_NEAR(r.w_key[0][0], 11.0, 1e-9);
  EXPECT_NEAR(r.w_value[0][0], 200.0, 1e-9);
}

// w averages over tokens and over sequences: G = c everywhere gives head_dim * c^2.
TEST(Sensitivity, RateQuantWeightIsMeanSquaredGradientNorm) {
  const ModelConfig c = test::gqa2_config(2, 2, 8);
  SensitivityAccumulator acc(c, options(8, {4}));
  for (float val : {1.0f, 3.0f}) {
    KvGradients<float> g = zeros(c, 5);
    for (auto& a : g.dk) std::fill(a.begin(), a.end(), val);
    for (auto& a : g.dv) std::fill(a.begin(), a.end(), 2 * val);
    acc.add(g);
  }
  const SensitivityReport r = acc.report();
  EXPECT_EQ(r.n_samples, 2);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) {
      EXPECT_NEAR(r.w_key[l][h], 8 * (1.0 + 9.0) / 2, 1e-9);
      EXPECT_NEAR(r.w_value[l][h], 8 * (4.0 + 36.0) / 2, 1e-9);
    }
}

KvGradients<float> random_grads(const ModelConfig& c, int T, uint64_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  KvGradients<float> g = zeros(c, T);
  for (auto* a : {&g.k, &g.v, &g.dk, &g.dv})
    for (auto& row : *a)
      for (auto& x : row) x = nd(rng);
  return g;
}

TEST(Sensitivity, DecreasesWithBitsAndIsLinearInTheGradient) {
  const ModelConfig c = test::gqa2_config(2, 2, 16);
  KvGradients<float> g = random_grads(c, 64, 1);
  SensitivityAccumulator a1(c, options(16, {2, 3, 4, 8, 16}));
  a1.add(g);
  for (auto* arr : {&g.dk, &g.dv})
    for (auto& row : *arr)
      for (auto& x : row) x *= 3;
  SensitivityAccumulator a3(c, options(16, {2, 3, 4, 8, 16}));
  a3.add(g);
  const SensitivityReport r1 = a1.report(), r3 = a3.report();
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 5; ++b) {
        if (b > 0) {
          EXPECT_LT(r1.pmkvq_key[l][h][b], r1.pmkvq_key[l][h][b - 1]);
          EXPECT_LT(r1.pmkvq_value[l][h][b], r1.pmkvq_value[l][h][b - 1]);
        }
        EXPECT_NEAR(r3.pmkvq_key[l][h][b], 3 * r1.pmkvq_key[l][h][b], 1e-5 * r3.pmkvq_key[l][h][b]);
        EXPECT_NEAR(r3.w_value[l][h], 9 * r1.w_value[l][h], 1e-5 * r3.w_value[l][h]);
      }
  // 2-bit error on unit Gaussians: |G| ~ 0.8, |err| ~ S/4 with S ~ 5/3 -> ~0.3 per element; 16-bit ~0.
  EXPECT_GT(r1.pmkvq_key[0][0][0] / (64 * 16), 0.1);
  EXPECT_LT(r1.pmkvq_key[0][0][4] / (64 * 16), 1e-4);
}

// Smoothed keys: s and w equal those of an unsmoothed run on K / lambda with gradient G * lambda
// (the stored keys and the gradient wrt them); values are untouched.
TEST(Sensitivity, SmoothingEqualsQuantizingScaledKeys) {
  const ModelConfig c = test::gqa2_config(1, 2, 8);
  const KvGradients<float> g = random_grads(c, 16, 2);
  SmoothingScales s;
  s.n_layer = 1;
  s.n_head = c.n_head;
  s.n_head_kv = 2;
  s.head_dim = 8;
  s.alpha = {0.5};
  s.lambda = {{1, 1, 2, 2, 4, 4, 0.5f, 0.5f, 3, 3, 1, 1, 8, 8, 0.25f, 0.25f}};
  SensitivityAccumulator smoothed(c, options(8, {2, 4}), &s);
  smoothed.add(g);
  KvGradients<float> scaled = g;
  for (size_t i = 0; i < scaled.k[0].size(); ++i) {
    const float l = s.lambda[0][i % 16];
    scaled.k[0][i] /= l;
    scaled.dk[0][i] *= l;
  }
  SensitivityAccumulator plain(c, options(8, {2, 4}));
  plain.add(scaled);
  const SensitivityReport a = smoothed.report(), b = plain.report();
  EXPECT_TRUE(a.smoothed);
  for (int h = 0; h < 2; ++h) {
    for (int bi = 0; bi < 2; ++bi) {
      EXPECT_NEAR(a.pmkvq_key[0][h][bi], b.pmkvq_key[0][h][bi], 1e-6 * b.pmkvq_key[0][h][bi]);
      EXPECT_NEAR(a.pmkvq_value[0][h][bi], b.pmkvq_value[0][h][bi], 1e-9);
    }
    EXPECT_NEAR(a.w_key[0][h], b.w_key[0][h], 1e-6 * b.w_key[0][h]);
  }
}

// KIVI keys quantize whole groups of 32 tokens; the 8 tokens past the last group count as exact.
TEST(Sensitivity, KiviLeavesThePartialTokenGroupUnquantized) {
  const ModelConfig c = test::gqa2_config(1, 1, 8);
  KvGradients<float> g = random_grads(c, 40, 3);
  SensitivityOptions o = options(8, {2});
  o.key.method = QuantMethod::kivi;
  SensitivityAccumulator full(c, o);
  full.add(g);
  for (size_t i = 32 * 8; i < g.dk[0].size(); ++i) g.dk[0][i] = 1000.0f;  // would dominate if counted
  SensitivityAccumulator tail(c, o);
  tail.add(g);
  EXPECT_DOUBLE_EQ(full.report().pmkvq_key[0][0][0], tail.report().pmkvq_key[0][0][0]);
}

TEST(Sensitivity, RejectsBadInput) {
  const ModelConfig c = test::gqa2_config(1, 1, 8);
  EXPECT_THROW(SensitivityAccumulator(c, options(8, {})), Error);
  EXPECT_THROW(SensitivityAccumulator(c, options(8, {5})), Error);
  EXPECT_THROW(SensitivityAccumulator(c, options(16, {2})), Error);
  SensitivityAccumulator acc(c, options(8, {2}));
  EXPECT_THROW(acc.report(), Error);
  KvGradients<float> g = zeros(c, 4);
  g.dv[0].pop_back();
  EXPECT_THROW(acc.add(g), Error);
  g = zeros(test::gqa2_config(2, 1, 8), 4);
  EXPECT_THROW(acc.add(g), Error);
}

TEST(Sensitivity, ReportSerialises) {
  const ModelConfig c = test::gqa2_config(2, 1, 8);
  SensitivityAccumulator acc(c, options(8, {2, 4}));
  acc.add(random_grads(c, 8, 4));
  const nlohmann::json j = acc.report();
  EXPECT_EQ(j.at("bits"), nlohmann::json({2, 4}));
  EXPECT_EQ(j.at("pmkvq_layer").size(), 2u);
  EXPECT_EQ(j.at("pmkvq_key")[1][0].size(), 2u);
  EXPECT_EQ(j.at("ratequant_w_value").size(), 2u);
  EXPECT_EQ(j.at("key_method"), "uniform");
}

}  // namespace
}  // namespace mpkv::calib

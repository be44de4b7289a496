// Distortion curves and the fit D(b) = alpha * beta^-b (RateQuant's model, docs/algorithms.md §6, §8).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/distortion.h"
#include "quant/kv_block_layout.h"
#include "util/error.h"

namespace mpkv {
namespace {

std::vector<float> gaussian_rows(int n, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x((size_t)n * d);
  for (float& v : x) v = nd(rng);
  return x;
}

TEST(ExponentialFit, RecoversExactExponentials) {
  for (double alpha : {0.01, 1.0, 2.5}) {
    for (double beta : {2.0, 3.7, 4.0, 5.3}) {
      const std::vector<int> bits = {1, 2, 3, 4, 8};
      std::vector<double> mse;
      for (int b : bits) mse.push_back(alpha * std::pow(beta, -b));
      const ExponentialFit f = fit_exponential(bits, mse);
      EXPECT_NEAR(f.alpha, alpha, 1e-9 * alpha);
      EXPECT_NEAR(f.beta, beta, 1e-9 * beta);
      EXPECT_NEAR(f.r2, 1.0, 1e-12);
    }
  }
}

TEST(ExponentialFit, HandComputedLeastSquaresOnNoisyPoints) {
  // ln D = {0, -1, -3} at b = {0, 1, 2}: slope -1.5, intercept 1/6 (normal equations by hand),
  // residuals {-1/6, 1/3, -1/6}: SS_res = 1/6, SS_tot = 14/3, R^2 = 1 - 1/28.
  const ExponentialFit f = fit_exponential({0, 1, 2}, {1.0, std::exp(-1.0), std::exp(-3.0)});
  EXPECT_NEAR(f.beta, std::exp(1.5), 1e-12);
  EXPECT_NEAR(f.alpha, std::exp(1.0 / 6), 1e-12);
  EXPECT_NEAR(f.r2, 1.0 - 1.0 / 28, 1e-12);
}

TEST(ExponentialFit, RejectsWhatCannotBeFitted) {
  EXPECT_THROW(fit_exponential({2}, {0.1}), Error);
  EXPECT_THROW(fit_exponential({2, 2}, {0.1, 0.2}), Error);
  EXPECT_THROW(fit_exponential({2, 3}, {0.1}), Error);
  EXPECT_THROW(fit_exponential({2, 3}, {0.1, 0.0}), Error);
  EXPECT_THROW(fit_exponential({2, 3}, {0.1, NAN}), Error);
}

// Uniform min-max on Gaussian data: MSE ~ S^2 / 12 with S = range / (2^b - 1), so the ratio per bit
// tends to 4 (6.02 dB/bit) as b grows: over {4, 8, 16} the fit gives (255/15)^(2/4) ~ 4.12 and
// (65535/255)^(2/8) ~ 4.00, i.e. beta ~ 4.03.
TEST(MeasureDistortion, UniformOnGaussianHasBetaNearFour) {
  constexpr double kBetaTol = 0.15;  // the 2^b - 1 (not 2^b) levels keep beta a little above 4
  const int d = 64, n = 4096;
  const std::vector<float> x = gaussian_rows(n, d, 1);
  const DistortionCurve c = measure_distortion({QuantMethod::uniform, KvRole::key, 4, d, 0}, x.data(), n, {4, 8, 16});
  EXPECT_NEAR(c.fit.beta, 4.0, kBetaTol);
  EXPECT_GT(c.fit.r2, 0.999);
  EXPECT_NEAR(c.variance, 1.0, 0.02);
  ASSERT_EQ(c.mse.size(), 3u);
  // Every measured MSE is above the Gaussian distortion-rate bound at the rate actually spent
  // (codes + fp16 scale and zero): no quantizer beats Shannon.
  for (size_t i = 0; i < c.bits.size(); ++i) {
    const double rate = make_kv_block_layout(Codec::uniform, GroupAxis::token, c.bits[i], d, 1, d).bits_per_element();
    EXPECT_GT(c.mse[i], c.variance * std::pow(4.0, -rate)) << c.bits[i];
    EXPECT_GT(c.mse[i], c.gaussian_bound(c.bits[i] + 1)) << c.bits[i];
  }
}

TEST(MeasureDistortion, EveryQuantizerDecreasesWithBits) {
  const int d = 64, n = 256;
  const std::vector<float> x = gaussian_rows(n, d, 2);
  for (QuantMethod m : {QuantMethod::uniform, QuantMethod::kivi, QuantMethod::rotated, QuantMethod::turbo}) {
    const QuantOptions o{m, KvRole::key, 2, d, 0};
    const DistortionCurve c = measure_distortion(o, x.data(), n, supported_distortion_bits(m));
    for (size_t i = 1; i < c.mse.size(); ++i) EXPECT_LT(c.mse[i], c.mse[i - 1]) << method_name(m);
    EXPECT_GT(c.fit.beta, 2.0) << method_name(m);
    EXPECT_LT(c.fit.beta, 8.0) << method_name(m);
    EXPECT_EQ(c.method, method_name(m));
  }
}

TEST(MeasureDistortion, KiviKeysUseWholeTokenGroupsOnly) {
  const int d = 64;
  const std::vector<float> x = gaussian_rows(100, d, 3);
  const DistortionCurve c = measure_distortion({QuantMethod::kivi, KvRole::key, 2, d, 32}, x.data(), 100, {2, 3});
  EXPECT_EQ(c.n_vectors, 96);
  EXPECT_THROW(measure_distortion({QuantMethod::kivi, KvRole::key, 2, d, 32}, x.data(), 20, {2, 3}), Error);
}

TEST(MeasureDistortion, ValidatesBeforeMeasuring) {
  const std::vector<float> x = gaussian_rows(8, 64, 4);
  EXPECT_THROW(measure_distortion({QuantMethod::uniform, KvRole::key, 2, 64, 0}, x.data(), 8, {2, 5}), Error);
  EXPECT_THROW(measure_distortion({QuantMethod::turbo, KvRole::key, 2, 64, 0}, x.data(), 8, {4, 8}), Error);
  EXPECT_THROW(measure_distortion({QuantMethod::uniform, KvRole::key, 2, 64, 0}, x.data(), 8, {}), Error);
}

TEST(MeasureDistortion, AllMethodsSkipRotationOnNonPowerOfTwo) {
  const std::vector<float> x64 = gaussian_rows(64, 64, 6), x96 = gaussian_rows(64, 96, 6);
  const std::vector<DistortionCurve> a = measure_distortion_all_methods(x64.data(), 64, 64, KvRole::key);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[3].method, "turbo");
  EXPECT_EQ(a[3].bits, (std::vector<int>{1, 2, 3, 4}));
  const std::vector<DistortionCurve> b = measure_distortion_all_methods(x96.data(), 64, 96, KvRole::value);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].method, "kivi");
  EXPECT_EQ(b[1].group, 96);  // KIVI values: per token, G = head_dim
}

TEST(DistortionCurveJson, RoundTrips) {
  const int d = 64;
  const std::vector<float> x = gaussian_rows(64, d, 5);
  const DistortionCurve c = measure_distortion({QuantMethod::rotated, KvRole::value, 2, d, 0}, x.data(), 64, {2, 3, 4});
  const nlohmann::json j = c;
  EXPECT_EQ(j.at("method"), "rotated");
  EXPECT_EQ(j.at("role"), "value");
  EXPECT_EQ(j.at("bits").size(), 3u);
  const DistortionCurve back = nlohmann::json::parse(j.dump()).get<DistortionCurve>();
  EXPECT_EQ(back.bits, c.bits);
  EXPECT_EQ(back.mse, c.mse);
  EXPECT_EQ(back.fit.beta, c.fit.beta);
  EXPECT_EQ(back.n_vectors, c.n_vectors);
  nlohmann::json bad = j;
  bad["mse"].erase(0);
  EXPECT_THROW(bad.get<DistortionCurve>(), Error);
}

}  // namespace
}  // namespace mpkv

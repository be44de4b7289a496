// Lloyd-Max codebooks for N(0, 1) computed by Lloyd's algorithm, checked against the published
// MSEs (Max 1960; TurboQuant / docs/algorithms.md §7) and against sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "quant/lloyd_max.h"
#include "util/error.h"

namespace mpkv {
namespace {

// Acceptance limit: within 1% of the published unit-Gaussian MSEs (Max's 1960 table;
// docs/algorithms.md section 7).
constexpr double kPublishedRelTol = 0.01;

TEST(LloydMax, UnitGaussianMseMatchesPublishedValues) {
  const double published[4] = {0.3634, 0.1175, 0.03455, 0.00950};
  for (int b = 1; b <= 4; ++b) {
    const LloydMaxCodebook& cb = lloyd_max_gaussian(b);
    EXPECT_NEAR(cb.mse, published[b - 1], kPublishedRelTol * published[b - 1]) << b << " bits";
    EXPECT_EQ(cb.centroids.size(), 1u << b);
    EXPECT_EQ(cb.thresholds.size(), (1u << b) - 1);
    for (size_t i = 0; i + 1 < cb.centroids.size(); ++i) EXPECT_LT(cb.centroids[i], cb.centroids[i + 1]);
    // symmetric about 0
    for (size_t i = 0; i < cb.centroids.size(); ++i)
      EXPECT_NEAR(cb.centroids[i], -cb.centroids[cb.centroids.size() - 1 - i], 1e-9);
  }
}

TEST(LloydMax, OneBitIsPlusMinusSqrtTwoOverPi) {
  // 1 bit: centroids E[|X|] = sqrt(2/pi), MSE 1 - 2/pi.
  const LloydMaxCodebook& cb = lloyd_max_gaussian(1);
  EXPECT_NEAR(cb.centroids[1], std::sqrt(2.0 / M_PI), 1e-12);
  EXPECT_NEAR(cb.mse, 1.0 - 2.0 / M_PI, 1e-12);
  EXPECT_NEAR(cb.thresholds[0], 0.0, 1e-12);
}

// The closed-form MSE agrees with a Monte-Carlo estimate through the fp32 thresholds.
TEST(LloydMax, SampledMseAgreesWithIntegral) {
  // 1e6 samples: the relative standard error of the MSE estimate is below 0.3% at every width.
  constexpr double kSampleRelTol = 0.01;
  std::mt19937_64 rng(42);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (int b = 1; b <= 4; ++b) {
    const LloydMaxCodebook& cb = lloyd_max_gaussian(b);
    double se = 0;
    const int n = 1000000;
    for (int i = 0; i < n; ++i) {
      const double x = nd(rng);
      size_t code = 0;
      while (code < cb.thresholds_f.size() && cb.thresholds_f[code] <= (float)x) ++code;
      se += (x - cb.centroids[code]) * (x - cb.centroids[code]);
    }
    EXPECT_NEAR(se / n, cb.mse, kSampleRelTol * cb.mse) << b << " bits";
  }
}

TEST(LloydMax, OnlyOneToFourBitsAreServed) {
  EXPECT_THROW(lloyd_max_gaussian(0), Error);
  EXPECT_THROW(lloyd_max_gaussian(5), Error);
}

}  // namespace
}  // namespace mpkv

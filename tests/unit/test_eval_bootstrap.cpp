// Block bootstrap intervals (src/eval/block_bootstrap.h) on series whose answer is known
// analytically: iid normal values (the interval of the mean is mean +/- 1.96 sigma / sqrt(n)),
// an AR(1) series (long-run variance sigma^2 (1 + rho) / (1 - rho): blocks must widen the
// interval by that factor, single positions must not), coverage over many replications, the
// paired dPPL interval, determinism, and block ids of interleaved streams.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eval/block_bootstrap.h"
#include "util/error.h"

namespace mpkv {
namespace {

constexpr double kZ95 = 1.959964;
// Width of a 2000-resample percentile interval against the analytic one: the resampling noise of
// the 2.5% / 97.5% quantiles is a few percent; 10% leaves room for it and for the sample's own
// standard deviation differing from sigma.
constexpr double kWidthRel = 0.10;
// Blocks of a dependent series: the block estimate of the long-run variance is biased low by about
// (correlation length / block) and noisier (fewer blocks), hence a wider tolerance.
constexpr double kBlockWidthRel = 0.20;

std::vector<double> normal_series(size_t n, double mean, double sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(mean, sd);
  std::vector<double> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// x_t = mean + rho (x_{t-1} - mean) + e_t, e_t ~ N(0, sd_e^2), started from the stationary law.
std::vector<double> ar1_series(size_t n, double mean, double rho, double sd_e, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> e(0, sd_e);
  std::vector<double> x(n);
  double dev = e(rng) / std::sqrt(1 - rho * rho);
  for (auto& v : x) {
    v = mean + dev;
    dev = rho * dev + e(rng);
  }
  return x;
}

std::vector<int32_t> one_stream(size_t n, int block) { return bootstrap_blocks(std::vector<int32_t>(n, 0), block); }

TEST(Bootstrap, IidMeanCoversWithAnalyticWidth) {
  const size_t n = 20000;
  const double mean = 3.0, sd = 2.0;
  const auto x = normal_series(n, mean, sd, 1);
  const double analytic = 2 * kZ95 * sd / std::sqrt((double)n);
  for (int block : {1, 50}) {  // iid: blocks change nothing but the noise
    BootstrapOptions o;
    const Interval ci = bootstrap_mean(x, one_stream(n, block), o);
    EXPECT_LT(ci.lo, mean) << "block " << block;
    EXPECT_GT(ci.hi, mean) << "block " << block;
    EXPECT_NEAR((ci.hi - ci.lo) / analytic, 1.0, kWidthRel) << "block " << block;
  }
}

TEST(Bootstrap, BlocksCaptureCorrelation) {
  const size_t n = 50000;
  const double mean = -1.0, rho = 0.8, sd_e = 1.0;
  const auto x = ar1_series(n, mean, rho, sd_e, 2);
  // sd of the mean of a stationary AR(1): sigma_x sqrt((1 + rho) / (1 - rho) / n), sigma_x^2 = sd_e^2 / (1 - rho^2).
  const double sigma_x = sd_e / std::sqrt(1 - rho * rho);
  const double analytic = 2 * kZ95 * sigma_x * std::sqrt((1 + rho) / (1 - rho) / n);
  BootstrapOptions o;
  const Interval blocked = bootstrap_mean(x, one_stream(n, 250), o);
  EXPECT_LT(blocked.lo, mean);
  EXPECT_GT(blocked.hi, mean);
  EXPECT_NEAR((blocked.hi - blocked.lo) / analytic, 1.0, kBlockWidthRel);
  // Resampling single positions ignores the correlation: about sqrt((1 - rho) / (1 + rho)) = 1/3 the width.
  const Interval single = bootstrap_mean(x, one_stream(n, 1), o);
  EXPECT_NEAR((single.hi - single.lo) / analytic, std::sqrt((1 - rho) / (1 + rho)), 0.1);
}

TEST(Bootstrap, CoverageOfTheMeanIsNear95Percent) {
  // Skewed iid values (exponential, mean 1): 300 independent samples, each with its own interval.
  const int reps = 300;
  const size_t n = 400;
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> d(1.0);
  BootstrapOptions o;
  o.resamples = 1000;
  const auto blocks = one_stream(n, 1);
  int covered = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> x(n);
    for (auto& v : x) v = d(rng);
    o.seed = 100 + r;
    const Interval ci = bootstrap_mean(x, blocks, o);
    covered += ci.lo <= 1.0 && 1.0 <= ci.hi;
  }
  // Binomial(300, 0.95) has sd 1.26%; percentile intervals of a skewed mean undercover slightly at n = 400.
  EXPECT_GE(covered, (int)(0.90 * reps));
  EXPECT_LE(covered, (int)(0.985 * reps));
}

TEST(Bootstrap, PairedPplDelta) {
  const size_t n = 8192;
  const auto ref = normal_series(n, 3.0, 1.5, 4);  // NLL-like values with a large spread of their own
  const auto blocks = one_stream(n, 64);
  BootstrapOptions o;
  // A constant shift c of every NLL: every resample gives exactly 100 (e^c - 1); the spread of the
  // reference itself cancels because the method and the reference are resampled together.
  std::vector<double> shifted(ref);
  for (auto& v : shifted) v += 0.01;
  const Interval exact = bootstrap_ppl_delta_pct(shifted, ref, blocks, o);
  EXPECT_NEAR(exact.lo, 100 * std::expm1(0.01), 1e-9);
  EXPECT_NEAR(exact.hi, 100 * std::expm1(0.01), 1e-9);
  // Shift plus iid noise of sd 0.2: the interval of mean(x - y) has width 2 z 0.2 / sqrt(n) in NLL, so
  // about 100 e^0.02 that in percent.
  auto noisy = ref;
  const auto noise = normal_series(n, 0.02, 0.2, 5);
  for (size_t i = 0; i < n; ++i) noisy[i] += noise[i];
  const Interval ci = bootstrap_ppl_delta_pct(noisy, ref, blocks, o);
  EXPECT_LT(ci.lo, 100 * std::expm1(0.02));
  EXPECT_GT(ci.hi, 100 * std::expm1(0.02));
  EXPECT_NEAR((ci.hi - ci.lo) / (100 * std::exp(0.02) * 2 * kZ95 * 0.2 / std::sqrt((double)n)), 1.0, kBlockWidthRel);
}

TEST(Bootstrap, SameSeedSameInterval) {
  const auto x = normal_series(1000, 0, 1, 6);
  const auto blocks = one_stream(x.size(), 10);
  BootstrapOptions o;
  const Interval a = bootstrap_mean(x, blocks, o), b = bootstrap_mean(x, blocks, o);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  o.seed += 1;
  const Interval c = bootstrap_mean(x, blocks, o);
  EXPECT_NE(a.lo, c.lo);
}

TEST(Bootstrap, BlocksFollowEachStream) {
  // The decode protocol's order: one position of every window per step.
  const std::vector<int32_t> stream{0, 1, 0, 1, 0, 1, 0, 1, 0};
  EXPECT_EQ(bootstrap_blocks(stream, 2), (std::vector<int32_t>{0, 1, 0, 1, 2, 3, 2, 3, 4}));
  EXPECT_EQ(bootstrap_blocks(stream, 1), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_THROW(bootstrap_blocks(stream, 0), Error);
  EXPECT_THROW(bootstrap_mean({}, {}, BootstrapOptions{}), Error);
}

}  // namespace
}  // namespace mpkv

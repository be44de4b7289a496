// Wilson intervals and the exact McNemar test (src/eval/accuracy_stats.h) against values worked
// out by hand from the formulas (z = 1.959964, z^2 = 3.841459), which match the published tables
// (Newcombe 1998, table I: 8/10 -> 0.4902 - 0.9433, 0/10 -> 0 - 0.2775).
#include <gtest/gtest.h>

#include <cmath>

#include "eval/accuracy_stats.h"
#include "util/error.h"

namespace mpkv {
namespace {

TEST(AccuracyStats, WilsonMatchesHandValues) {
  // 8/10: centre (8 + 1.920730) / 13.841459 = 0.716740; half 0.141601 * sqrt(1.6 + 0.960365) = 0.226578.
  WilsonInterval w = wilson_interval(8, 10);
  EXPECT_NEAR(w.lo, 0.490162, 2e-6);
  EXPECT_NEAR(w.hi, 0.943318, 2e-6);
  // 0/10: centre = half = 0.138766.
  w = wilson_interval(0, 10);
  EXPECT_EQ(w.lo, 0.0);
  EXPECT_NEAR(w.hi, 0.277532, 2e-6);
  // 50/100: 0.5 +/- 1.959964 / 103.841459 * sqrt(25 + 0.960365) = 0.5 +/- 0.096170.
  w = wilson_interval(50, 100);
  EXPECT_NEAR(w.lo, 0.403830, 2e-6);
  EXPECT_NEAR(w.hi, 0.596170, 2e-6);
  // 10/10 mirrors 0/10.
  w = wilson_interval(10, 10);
  EXPECT_NEAR(w.lo, 1 - 0.277532, 2e-6);
  EXPECT_EQ(w.hi, 1.0);
  w = wilson_interval(0, 0);
  EXPECT_EQ(w.lo, 0.0);
  EXPECT_EQ(w.hi, 1.0);
}

TEST(AccuracyStats, McNemarExactMatchesBinomialTails) {
  EXPECT_NEAR(mcnemar_exact_p(1, 9), 2.0 * 11 / 1024, 1e-12);        // (C(10,0) + C(10,1)) / 2^10
  EXPECT_NEAR(mcnemar_exact_p(9, 1), 2.0 * 11 / 1024, 1e-12);        // symmetric
  EXPECT_NEAR(mcnemar_exact_p(2, 8), 2.0 * 56 / 1024, 1e-12);        // 1 + 10 + 45
  EXPECT_NEAR(mcnemar_exact_p(0, 5), 2.0 / 32, 1e-12);
  EXPECT_NEAR(mcnemar_exact_p(3, 3), 1.0, 1e-12);                     // 2 * 42/64 capped at 1
  EXPECT_NEAR(mcnemar_exact_p(0, 0), 1.0, 1e-12);
  // Large n stays finite: b = 0, c = 60 -> 2^-59.
  EXPECT_NEAR(mcnemar_exact_p(0, 60) / std::ldexp(1.0, -59), 1.0, 1e-9);
}

TEST(AccuracyStats, PairedCountsSplitTheFourCells) {
  const std::vector<bool> ref{true, true, false, false, true, false};
  const std::vector<bool> m{true, false, true, false, false, false};
  const PairedCounts p = paired_counts(ref, m);
  EXPECT_EQ(p.n, 6);
  EXPECT_EQ(p.both_right, 1);
  EXPECT_EQ(p.ref_only, 2);
  EXPECT_EQ(p.method_only, 1);
  EXPECT_EQ(p.both_wrong, 2);
  EXPECT_NEAR(p.difference(), -1.0 / 6, 1e-12);
  EXPECT_THROW(paired_counts(ref, {true}), InternalError);
  EXPECT_THROW(wilson_interval(3, 2), InternalError);
}

}  // namespace
}  // namespace mpkv

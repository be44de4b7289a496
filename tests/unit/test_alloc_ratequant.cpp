// RateQuant allocation: reverse water-filling, greedy and knapsack integer bits, AM/GM report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "alloc/integer_bits.h"
#include "alloc/ratequant_allocator.h"
#include "alloc/water_filling.h"
#include "util/error.h"

namespace mpkv {
namespace {

// The water level is solved in closed form on one linear segment: bits agree with a hand derivation
// to rounding of a few logs and divisions.
constexpr double kBitsTol = 1e-9;
// Objectives are sums of N positive terms computed in the same order or a different one.
constexpr double kObjectiveRelTol = 1e-12;

RateQuantProblem problem(const std::vector<double>& w, double avg, int lo, int hi, double beta = 4.0,
                         double alpha = 1.0) {
  RateQuantProblem p;
  for (double x : w) p.components.push_back({x, {alpha, beta}});
  p.avg_bits = avg;
  p.min_bits = lo;
  p.max_bits = hi;
  return p;
}

void expect_bits_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], kBitsTol) << "component " << i;
}

// --- continuous reverse water-filling -------------------------------------------------------------

TEST(WaterFill, HandSolvedTwoComponents) {
  // beta = 4, w = {1, 16}, b_avg = 4: mean ln w = ln 4, so b_i = 4 + (ln w_i - ln 4) / ln 4
  // = {4 - 1, 4 + 1} = {3, 5}. Objective 4^-3 + 16 * 4^-5 = 1/64 + 1/64 = 1/32.
  const RateQuantProblem p = problem({1, 16}, 4, 2, 8);
  const ContinuousAllocation a = water_fill(p);
  expect_bits_near(a.bits, {3, 5});
  EXPECT_NEAR(a.objective, 1.0 / 32, 1e-15);
  EXPECT_EQ(a.n_at_min + a.n_at_max, 0);
}

TEST(WaterFill, MatchesPaperClosedFormWithoutActiveBounds) {
  // Eq. (2) of the paper, evaluated here directly: b_i = b_avg + (ln w_i - mean ln w) / ln beta.
  std::mt19937 rng(1);
  std::lognormal_distribution<double> lw(0.0, 1.0);
  for (double beta : {3.6, 4.0, 5.3}) {
    std::vector<double> w(24);
    for (double& x : w) x = lw(rng);
    const RateQuantProblem p = problem(w, 4.0, 1, 16, beta, 0.7);
    double mean_ln = 0;
    for (double x : w) mean_ln += std::log(x) / w.size();
    std::vector<double> want;
    for (double x : w) want.push_back(4.0 + (std::log(x) - mean_ln) / std::log(beta));
    ASSERT_GT(*std::min_element(want.begin(), want.end()), 1.0);  // the bounds really are inactive
    ASSERT_LT(*std::max_element(want.begin(), want.end()), 16.0);
    RateQuantProblem q = p;
    q.min_max_quantizer = false;
    expect_bits_near(water_fill(q).bits, want);
  }
}

TEST(WaterFill, ClipsAtUpperBoundAndResolvesTheRest) {
  // beta = 4, w = {1, 1, 4^6}, b_avg = 4, bounds [2, 6]. Unclipped: mean ln w = 2 ln 4, so
  // b = {4 - 2, 4 - 2, 4 + 4} = {2, 2, 8}: component 3 is over 6. Clip it at 6; the other two share
  // 12 - 6 = 6 bits equally: {3, 3, 6}. KKT: component 3's marginal w ln4 4^-6 = ln 4 exceeds the
  // level ln4 4^-3 of the free ones, so it stays at its bound.
  const ContinuousAllocation a = water_fill(problem({1, 1, std::pow(4.0, 6)}, 4, 2, 6));
  expect_bits_near(a.bits, {3, 3, 6});
  EXPECT_EQ(a.n_at_max, 1);
  EXPECT_EQ(a.n_at_min, 0);
}

TEST(WaterFill, ClipsAtLowerBound) {
  // w = {4^-6, 1, 1}, b_avg 4, bounds [2, 8]: unclipped b = {4 - 4, 4 + 2, 4 + 2} = {0, 6, 6}; clip the
  // first at 2, the other two share 10 bits: {2, 5, 5}.
  const ContinuousAllocation a = water_fill(problem({std::pow(4.0, -6), 1, 1}, 4, 2, 8));
  expect_bits_near(a.bits, {2, 5, 5});
  EXPECT_EQ(a.n_at_min, 1);
}

TEST(WaterFill, ClipsAtBothBoundsIncludingWhereNaiveClippingFails) {
  // w = {4^-5, 1, 4^5}, beta 4, b_avg 5, bounds [2, 8]: unclipped {0, 5, 10}. Clip both ends:
  // {2, ?, 8}, the middle gets 15 - 10 = 5: {2, 5, 8}. Both stay clipped at that level (0 < 2, 10 > 8).
  const ContinuousAllocation a = water_fill(problem({std::pow(4.0, -5), 1, std::pow(4.0, 5)}, 5, 2, 8));
  expect_bits_near(a.bits, {2, 5, 8});
  EXPECT_EQ(a.n_at_min, 1);
  EXPECT_EQ(a.n_at_max, 1);
  // A case where "clip every violator, re-solve the free ones, never unclip" fails: beta 4, ln w / ln 4
  // = c = {-10, 1.5, 1.5, 30}, b_avg 4 (16 bits), bounds [2, 6]. Round one: mean c = 5.75, so
  // b = 4 + c - 5.75 = {-11.75, -0.25, -0.25, 28.25}: all four violate; clipping gives {2, 2, 2, 6},
  // 12 bits, and nothing is left free to take the other 4. The optimum: components 1 and 4 at their
  // bounds, 2 and 3 share 16 - 8 = 8 bits: {2, 4, 4, 6} (level t = 2.5: c_1 + t = -7.5 < 2 and
  // c_4 + t = 32.5 > 6, so both stay clipped).
  const ContinuousAllocation b = water_fill(problem({std::pow(4.0, -10), std::pow(4.0, 1.5), std::pow(4.0, 1.5),
                                                     std::pow(4.0, 30)}, 4, 2, 6));
  expect_bits_near(b.bits, {2, 4, 4, 6});
  EXPECT_EQ(b.n_at_min, 1);
  EXPECT_EQ(b.n_at_max, 1);
}

TEST(WaterFill, PerComponentBetaUsesTheLagrangianForm) {
  // beta_1 = e (ln 1), beta_2 = e^2 (ln 2); w_1 alpha_1 = 1, w_2 alpha_2 = 1/2. Stationarity
  // w alpha ln(beta) beta^-b = mu: e^-b1 = mu and (1/2)(2) e^-2b2 = mu, so b1 = t, b2 = t/2 (t = -ln mu).
  // b1 + b2 = 2 * 4.5 = 9 -> t = 6: {6, 3}.
  RateQuantProblem p;
  p.components = {{1.0, {1.0, std::exp(1.0)}}, {0.5, {1.0, std::exp(2.0)}}};
  p.avg_bits = 4.5;
  p.min_bits = 2;
  p.max_bits = 8;
  const ContinuousAllocation a = water_fill(p);
  expect_bits_near(a.bits, {6, 3});
  EXPECT_NEAR(a.level, 6.0, kBitsTol);
}

TEST(WaterFill, EqualWeightsGiveUniformAndBitsSumToBudget) {
  const ContinuousAllocation a = water_fill(problem(std::vector<double>(10, 0.3), 2.7, 2, 8));
  for (double b : a.bits) EXPECT_NEAR(b, 2.7, kBitsTol);
  std::mt19937 rng(4);
  std::lognormal_distribution<double> lw(0.0, 2.0);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> w(30);
    for (double& x : w) x = lw(rng);
    const double avg = std::uniform_real_distribution<double>(2.0, 8.0)(rng);
    const ContinuousAllocation c = water_fill(problem(w, avg, 2, 8));
    EXPECT_NEAR(std::accumulate(c.bits.begin(), c.bits.end(), 0.0), 30 * avg, 1e-9);
    for (double b : c.bits) EXPECT_TRUE(b >= 2 && b <= 8);
  }
}

TEST(WaterFill, ContinuousOptimumIsNotBeatenByPerturbations) {
  // Moving delta bits from any component i to any j (staying in bounds) never lowers the objective.
  std::mt19937 rng(9);
  std::lognormal_distribution<double> lw(0.0, 1.5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> w(8);
    for (double& x : w) x = lw(rng);
    const RateQuantProblem p = problem(w, 3.3, 2, 5, 4.4);
    const ContinuousAllocation a = water_fill(p);
    for (size_t i = 0; i < w.size(); ++i)
      for (size_t j = 0; j < w.size(); ++j) {
        if (i == j) continue;
        std::vector<double> b = a.bits;
        const double d = 1e-3;
        if (b[i] - d < 2 || b[j] + d > 5) continue;
        b[i] -= d, b[j] += d;
        EXPECT_GE(weighted_distortion(p, b), a.objective * (1 - kObjectiveRelTol)) << trial << " " << i << "->" << j;
      }
  }
}

// --- integer bits --------------------------------------------------------------------------------

// Every allocation in set^N with sum_i c_i b_i <= budget, the least objective.
double brute_force(const RateQuantProblem& p, const std::vector<int>& set) {
  const size_t n = p.components.size();
  const int64_t budget = integer_bit_budget(p);
  std::vector<size_t> idx(n, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    int64_t sum = 0;
    std::vector<int> bits(n);
    for (size_t i = 0; i < n; ++i) bits[i] = set[idx[i]], sum += (int64_t)p.components[i].cost * bits[i];
    if (sum <= budget) best = std::min(best, weighted_distortion(p, bits));
    size_t k = 0;
    while (k < n && ++idx[k] == set.size()) idx[k++] = 0;
    if (k == n) break;
  }
  return best;
}

TEST(GreedyBits, HandSolvedTwoComponents) {
  // w = {1, 16}, beta 4, b_avg 4 -> 8 bits, start {2, 2}, 4 steps. Gains w (4^-b - 4^-(b+1)) = (3/4) w 4^-b:
  // comp 2 at 2: 0.75 > comp 1 at 2: 3/64 -> comp 2 to 3; at 3: 3/16 > 3/64 -> to 4; at 4: 3/64 ties
  // comp 1 at 2 -> lower index: comp 1 to 3 (next gain 3/256); comp 2 at 4: 3/64 -> to 5. Result {3, 5}.
  const IntegerAllocation a = greedy_integer_bits(problem({1, 16}, 4, 2, 8));
  EXPECT_EQ(a.bits, (std::vector<int>{3, 5}));
  EXPECT_EQ(a.bit_sum, 8);
  EXPECT_EQ(a.bit_budget, 8);
  EXPECT_NEAR(a.objective, 1.0 / 32, 1e-15);
}

TEST(GreedyBits, EqualWeightsGiveUniform) {
  const IntegerAllocation a = greedy_integer_bits(problem(std::vector<double>(12, 2.0), 3, 2, 8));
  EXPECT_EQ(a.bits, std::vector<int>(12, 3));
  // b_avg 3.5 over 12: 42 bits -> six components at 4 and six at 3 (any six: equal weights).
  const IntegerAllocation b = greedy_integer_bits(problem(std::vector<double>(12, 2.0), 3.5, 2, 8));
  EXPECT_EQ(std::count(b.bits.begin(), b.bits.end(), 4), 6);
  EXPECT_EQ(std::count(b.bits.begin(), b.bits.end(), 3), 6);
}

TEST(GreedyBits, BudgetIsFlooredNeverRoundedUp) {
  // 7 components at b_avg 2.5 -> 17.5 bits -> 17 bits spent.
  const IntegerAllocation a = greedy_integer_bits(problem({1, 2, 3, 4, 5, 6, 7}, 2.5, 2, 8));
  EXPECT_EQ(a.bit_budget, 17);
  EXPECT_EQ(a.bit_sum, 17);
  // 30 * 2.1 = 62.999999... in doubles: still 63 bits.
  EXPECT_EQ(integer_bit_budget(problem(std::vector<double>(30, 1.0), 2.1, 2, 8)), 63);
}

TEST(GreedyBits, MatchesExhaustiveSearch) {
  std::mt19937 rng(21);
  std::lognormal_distribution<double> lw(0.0, 2.0);
  std::uniform_real_distribution<double> ub(3.4, 5.4);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + trial % 5;  // 2..6 components, bits 2..6
    RateQuantProblem p;
    for (int i = 0; i < n; ++i) p.components.push_back({lw(rng), {0.1 + ub(rng), ub(rng)}});  // per-component beta
    p.min_bits = 2;
    p.max_bits = 6;
    p.avg_bits = std::uniform_real_distribution<double>(2.0, 6.0)(rng);
    const IntegerAllocation a = greedy_integer_bits(p);
    const double want = brute_force(p, {2, 3, 4, 5, 6});
    EXPECT_NEAR(a.objective, want, kObjectiveRelTol * want) << "trial " << trial;
    EXPECT_LE(a.bit_sum, a.bit_budget);
  }
}

TEST(KnapsackBits, MatchesBruteForceOnGappedSets) {
  std::mt19937 rng(33);
  std::lognormal_distribution<double> lw(0.0, 2.0);
  std::uniform_real_distribution<double> ub(3.4, 5.4);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 6;  // 1..6 components
    const std::vector<int> set = trial % 2 ? std::vector<int>{2, 4, 8} : std::vector<int>{2, 3, 8};
    RateQuantProblem p;
    for (int i = 0; i < n; ++i) p.components.push_back({lw(rng), {0.1 + ub(rng), ub(rng)}});
    p.min_bits = 2;
    p.max_bits = 8;
    p.avg_bits = std::uniform_real_distribution<double>(2.0, 8.0)(rng);
    const IntegerAllocation a = knapsack_integer_bits(p, set);
    const double want = brute_force(p, set);
    EXPECT_NEAR(a.objective, want, kObjectiveRelTol * want) << "trial " << trial;
    EXPECT_LE(a.bit_sum, a.bit_budget);
    for (int b : a.bits) EXPECT_TRUE(std::find(set.begin(), set.end(), b) != set.end());
  }
}

// Components of different costs per bit (sliding-window layers hold fewer pages, rate_model.h):
// the knapsack is exact against brute force under the cost-weighted budget, and ratequant_allocate
// takes it even for contiguous sets (greedy's one-bit steps assume equal costs).
TEST(KnapsackBits, MatchesBruteForceWithCosts) {
  std::mt19937 rng(35);
  std::lognormal_distribution<double> lw(0.0, 2.0);
  std::uniform_real_distribution<double> ub(3.4, 5.4);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 6;
    const std::vector<int> set = trial % 3 == 0 ? std::vector<int>{2, 4, 8}
                                 : trial % 3 == 1 ? std::vector<int>{2, 3, 4, 8} : std::vector<int>{2, 3, 4, 5};
    RateQuantProblem p;
    for (int i = 0; i < n; ++i) p.components.push_back({lw(rng), {0.1 + ub(rng), ub(rng)}, 1 + (int)(rng() % 7)});
    p.min_bits = 2;
    p.max_bits = set.back();
    p.avg_bits = std::uniform_real_distribution<double>(2.0, (double)set.back())(rng);
    const RateQuantResult r = ratequant_allocate(p, set);
    EXPECT_EQ(r.integerization, n > 1 && !unit_costs(p) ? "knapsack" : r.integerization) << "trial " << trial;
    const double want = brute_force(p, set);
    EXPECT_NEAR(r.objective, want, kObjectiveRelTol * want) << "trial " << trial;
    EXPECT_LE(cost_of(p, r.bits), integer_bit_budget(p)) << "trial " << trial;
  }
  RateQuantProblem p = problem({1.0, 2.0}, 3.0, 2, 4);
  p.components[1].cost = 3;
  EXPECT_THROW(greedy_integer_bits(p), Error);
  p.components[1].cost = 0;
  EXPECT_THROW(validate(p), Error);
}

// With costs the water level equalises w_i alpha ln(beta) beta^-b_i / c_i over the free components
// and spends sum_i c_i b_i = C b_avg: a component twice as expensive per bit gets log_beta(2) fewer
// bits than an equal-weight one.
TEST(WaterFill, CostsEqualiseMarginalGainPerCost) {
  RateQuantProblem p = problem({1.0, 1.0, 3.0}, 4.0, 2, 8);
  p.components[1].cost = 2;
  p.components[2].cost = 5;
  const ContinuousAllocation a = water_fill(p);
  EXPECT_NEAR(p.components[0].cost * a.bits[0] + p.components[1].cost * a.bits[1] + p.components[2].cost * a.bits[2],
              (double)total_cost(p) * 4.0, kBitsTol);
  EXPECT_NEAR(a.bits[0] - a.bits[1], std::log(2.0) / std::log(4.0), kBitsTol);
  auto gain_per_cost = [&](int i) { return p.components[i].weight * std::pow(4.0, -a.bits[i]) / p.components[i].cost; };
  EXPECT_NEAR(gain_per_cost(0), gain_per_cost(2), 1e-12);
}

TEST(KnapsackBits, HandSolvedGappedCase) {
  // Set {2, 4, 8}, beta 4, w = {1, 256}, b_avg 5 -> 10 bits. Options within 10 bits:
  //   {2, 8}: 4^-2 + 256 * 4^-8 = 1/16 + 1/256 = 17/256
  //   {4, 4}: 1/256 + 1 = 257/256;  {2, 4}: 1/16 + 1 ;  {2, 2}: 1/16 + 16  (and {4, 2}, {8, 2} worse)
  // Optimum {2, 8}. Greedy on the contiguous range would have reached {4, 6}, not in the set.
  const IntegerAllocation a = knapsack_integer_bits(problem({1, 256}, 5, 2, 8), {8, 2, 4});
  EXPECT_EQ(a.bits, (std::vector<int>{2, 8}));
  EXPECT_NEAR(a.objective, 17.0 / 256, 1e-15);
}

TEST(KnapsackBits, EqualsGreedyOnContiguousSets) {
  std::mt19937 rng(5);
  std::lognormal_distribution<double> lw(0.0, 1.0);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<double> w(40);
    for (double& x : w) x = lw(rng);
    const RateQuantProblem p = problem(w, std::uniform_real_distribution<double>(2, 4)(rng), 2, 4, 4.6);
    const double g = greedy_integer_bits(p).objective;
    EXPECT_NEAR(knapsack_integer_bits(p, {2, 3, 4}).objective, g, kObjectiveRelTol * g);
  }
}

TEST(KnapsackBits, RejectsBadSetsAndInfeasibleBudget) {
  const RateQuantProblem p = problem({1, 2, 3}, 3, 2, 8);
  EXPECT_THROW(knapsack_integer_bits(p, {}), Error);
  EXPECT_THROW(knapsack_integer_bits(p, {2, 2, 4}), Error);
  EXPECT_THROW(knapsack_integer_bits(p, {2, 16}), Error);  // above max_bits
  try {
    knapsack_integer_bits(p, {4, 8});  // 9 bits cannot give three components 4 bits
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("smallest feasible average is 4"), std::string::npos) << e.what();
  }
}

// --- problem validation --------------------------------------------------------------------------

TEST(RateQuantProblemCheck, MinMaxQuantizersNeedTwoBits) {
  RateQuantProblem p = problem({1, 2}, 3, 1, 8);
  EXPECT_THROW(water_fill(p), Error);
  EXPECT_THROW(greedy_integer_bits(p), Error);
  p.min_max_quantizer = false;  // Lloyd-Max codes (turbo) are fine at 1 bit
  EXPECT_NO_THROW(greedy_integer_bits(p));
}

TEST(RateQuantProblemCheck, RejectsBadInput) {
  EXPECT_THROW(water_fill(problem({}, 3, 2, 8)), Error);
  EXPECT_THROW(water_fill(problem({1, 0}, 3, 2, 8)), Error);
  EXPECT_THROW(water_fill(problem({1, NAN}, 3, 2, 8)), Error);
  EXPECT_THROW(water_fill(problem({1, 2}, 3, 2, 8, 1.0)), Error);   // beta must be > 1
  EXPECT_THROW(water_fill(problem({1, 2}, 3, 2, 8, 4, 0)), Error);  // alpha must be > 0
  EXPECT_THROW(water_fill(problem({1, 2}, 1.5, 2, 8)), Error);      // average below b_min
  EXPECT_THROW(water_fill(problem({1, 2}, 9, 2, 8)), Error);        // above b_max
  EXPECT_THROW(water_fill(problem({1, 2}, 3, 4, 3)), Error);        // max < min
}

// --- end to end with the report ------------------------------------------------------------------

TEST(RateQuantAllocate, ReportsPredictedAndAchievedGainByHand) {
  // w = {1, 16}: AM = 8.5, GM = 4, AM/GM = 2.125. Allocation {3, 5} (above): objective 1/32; uniform
  // at 4 bits: (1 + 16) 4^-4 = 17/256; achieved gain (17/256) / (8/256) = 2.125 = AM/GM (Theorem 3, exact
  // here because the optimum is integral and unclipped).
  const RateQuantResult r = ratequant_allocate(problem({1, 16}, 4, 2, 8));
  EXPECT_EQ(r.bits, (std::vector<int>{3, 5}));
  EXPECT_EQ(r.integerization, "greedy");
  EXPECT_NEAR(r.predicted_gain_am_gm, 2.125, 1e-12);
  EXPECT_NEAR(r.objective, 1.0 / 32, 1e-15);
  EXPECT_NEAR(r.objective_uniform, 17.0 / 256, 1e-15);
  EXPECT_NEAR(r.achieved_gain, 2.125, 1e-12);
  EXPECT_NEAR(r.objective_continuous, 1.0 / 32, 1e-15);
  EXPECT_NE(describe(r).find("2.1250"), std::string::npos) << describe(r);
}

TEST(RateQuantAllocate, EqualWeightsPredictNoGain) {
  const RateQuantResult r = ratequant_allocate(problem(std::vector<double>(18, 0.01), 4, 2, 8));
  EXPECT_NEAR(r.predicted_gain_am_gm, 1.0, 1e-12);
  EXPECT_NEAR(r.achieved_gain, 1.0, 1e-12);
  EXPECT_EQ(r.bits, std::vector<int>(18, 4));
}

TEST(RateQuantAllocate, GappedSetUsesKnapsackAndContinuousBoundsTheInteger) {
  std::mt19937 rng(17);
  std::lognormal_distribution<double> lw(0.0, 1.5);
  std::vector<double> w(180);  // SmolLM2: 30 layers x 3 KV heads x {K, V}
  for (double& x : w) x = lw(rng);
  const RateQuantProblem p = problem(w, 2.5, 2, 8, 4.2, 0.3);
  const RateQuantResult r = ratequant_allocate(p, {2, 4, 8});
  EXPECT_EQ(r.integerization, "knapsack");
  EXPECT_LE(r.bit_sum, r.bit_budget);
  EXPECT_EQ(r.bit_budget, 450);
  EXPECT_GE(r.objective, r.objective_continuous * (1 - kObjectiveRelTol));  // the relaxation is a lower bound
  const RateQuantResult g = ratequant_allocate(p);  // contiguous 2..8
  EXPECT_EQ(g.integerization, "greedy");
  EXPECT_LE(g.objective, r.objective * (1 + kObjectiveRelTol));  // more choices never hurt
  const nlohmann::json j = r;
  const RateQuantResult back = j.get<RateQuantResult>();
  EXPECT_EQ(back.bits, r.bits);
  EXPECT_EQ(back.allowed_bits, (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(back.objective, r.objective);
}

}  // namespace
}  // namespace mpkv

// PM-KVQ's multiple-choice integer program (GLPK) against brute force, and its budget errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "alloc/multiple_choice.h"
#include "alloc/pmkvq_allocator.h"
#include "util/error.h"

namespace mpkv {
namespace {

// GLPK's branch and bound compares objectives with small relative tolerances (and we rescale costs
// to [0, 1] per problem), so a near-tie may be broken either way: objectives agree to this fraction
// of the cost range, not bit for bit.
constexpr double kObjectiveTol = 1e-7;

struct Brute {
  double objective = std::numeric_limits<double>::infinity();
  bool feasible = false;
};

// Every assignment, checked in integers.
Brute brute_force(const MultipleChoiceProblem& p) {
  Brute best;
  const size_t n = p.cost.size();
  std::vector<size_t> idx(n, 0);
  while (true) {
    double obj = 0;
    int64_t bytes = 0;
    for (size_t i = 0; i < n; ++i) obj += p.cost[i][idx[i]], bytes += p.bytes[i][idx[i]];
    if (bytes <= p.budget_bytes && obj < best.objective) best.objective = obj, best.feasible = true;
    size_t k = 0;
    while (k < n && ++idx[k] == p.cost[k].size()) idx[k++] = 0;
    if (k == n) break;
  }
  return best;
}

MultipleChoiceProblem random_problem(std::mt19937& rng, int n, int m, bool pmkvq_shaped) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int64_t> ub(1000, 100000);
  MultipleChoiceProblem p;
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<double> c(m);
    std::vector<int64_t> b(m);
    for (int j = 0; j < m; ++j) c[j] = u(rng), b[j] = ub(rng);
    if (pmkvq_shaped) {  // more bytes, less sensitivity: the realistic trade-off
      std::sort(b.begin(), b.end());
      std::sort(c.begin(), c.end(), std::greater<double>());
    }
    lo += *std::min_element(b.begin(), b.end());
    hi += *std::max_element(b.begin(), b.end());
    p.cost.push_back(c);
    p.bytes.push_back(b);
  }
  p.budget_bytes = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  return p;
}

void expect_matches_brute_force(const MultipleChoiceProblem& p, const std::string& what) {
  const Brute want = brute_force(p);
  ASSERT_TRUE(want.feasible) << what;
  const MultipleChoiceSolution got = solve_multiple_choice(p);
  ASSERT_EQ(got.choice.size(), p.cost.size()) << what;
  double obj = 0;
  int64_t bytes = 0;
  for (size_t i = 0; i < p.cost.size(); ++i) {
    ASSERT_GE(got.choice[i], 0);
    ASSERT_LT(got.choice[i], (int)p.cost[i].size());
    obj += p.cost[i][got.choice[i]];
    bytes += p.bytes[i][got.choice[i]];
  }
  EXPECT_LE(bytes, p.budget_bytes) << what;
  EXPECT_EQ(bytes, got.bytes) << what;
  EXPECT_DOUBLE_EQ(obj, got.objective) << what;
  EXPECT_NEAR(got.objective, want.objective, kObjectiveTol * p.cost.size()) << what;
}

TEST(MultipleChoice, MatchesBruteForceSixByThree) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    expect_matches_brute_force(random_problem(rng, 6, 3, seed % 2 == 0), "seed " + std::to_string(seed));
  }
}

TEST(MultipleChoice, MatchesBruteForceOtherShapes) {
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937 rng(1000 + seed);
    expect_matches_brute_force(random_problem(rng, 8, 3, true), "8x3 seed " + std::to_string(seed));
    expect_matches_brute_force(random_problem(rng, 5, 4, false), "5x4 seed " + std::to_string(seed));
    expect_matches_brute_force(random_problem(rng, 1, 5, false), "1x5 seed " + std::to_string(seed));
  }
}

TEST(MultipleChoice, MatchesBruteForceWhenBadlyScaled) {
  // Real sensitivities can be ~1e-9 and real budgets ~1e9 bytes: GLPK must not lose the optimum in
  // its tolerances (costs are rescaled; bytes are exact in doubles and rechecked in integers).
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937 rng(5000 + seed);
    MultipleChoiceProblem p = random_problem(rng, 6, 3, true);
    for (auto& row : p.cost)
      for (double& c : row) c = 1e-9 * c + 1e-6;  // a large common offset, tiny differences
    for (auto& row : p.bytes)
      for (int64_t& b : row) b *= 10007;
    p.budget_bytes *= 10007;
    const Brute want = brute_force(p);
    const MultipleChoiceSolution got = solve_multiple_choice(p);
    EXPECT_LE(got.bytes, p.budget_bytes);
    EXPECT_NEAR(got.objective, want.objective, kObjectiveTol * 6 * 1e-9) << seed;
  }
}

TEST(MultipleChoice, HandSolvedKnapsack) {
  // Two components, choices (cost, bytes): A = {(10, 1), (4, 3)}, B = {(8, 1), (1, 4)}, budget 5.
  // Feasible pairs: (A0,B0) cost 18 bytes 2; (A1,B0) 12 bytes 4; (A0,B1) 11 bytes 5; (A1,B1) bytes 7 > 5.
  // Optimum: A0, B1 with cost 11, bytes 5.
  MultipleChoiceProblem p;
  p.cost = {{10, 4}, {8, 1}};
  p.bytes = {{1, 3}, {1, 4}};
  p.budget_bytes = 5;
  const MultipleChoiceSolution s = solve_multiple_choice(p);
  EXPECT_EQ(s.choice, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(s.objective, 11);
  EXPECT_EQ(s.bytes, 5);
  EXPECT_EQ(s.min_feasible_bytes, 2);
  p.budget_bytes = 4;  // now (A1, B0): cost 12
  EXPECT_EQ(solve_multiple_choice(p).choice, (std::vector<int>{1, 0}));
}

TEST(MultipleChoice, InfeasibleBudgetNamesTheSmallestFeasibleOne) {
  MultipleChoiceProblem p;
  p.cost = {{1, 0}, {1, 0}, {1, 0}};
  p.bytes = {{100, 200}, {150, 300}, {70, 90}};
  // Smallest feasible: 100 + 150 + 70 = 320.
  p.budget_bytes = 319;
  try {
    solve_multiple_choice(p);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("320 bytes"), std::string::npos) << e.what();
  }
  p.budget_bytes = 320;  // exactly enough: everything at its smallest
  const MultipleChoiceSolution s = solve_multiple_choice(p);
  EXPECT_EQ(s.choice, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(s.bytes, 320);
}

TEST(MultipleChoice, RejectsMalformedTables) {
  MultipleChoiceProblem p;
  p.budget_bytes = 100;
  EXPECT_THROW(solve_multiple_choice(p), Error);  // no components
  p.cost = {{1, 2}};
  p.bytes = {{1}};
  EXPECT_THROW(solve_multiple_choice(p), Error);  // ragged
  p.bytes = {{1, -1}};
  EXPECT_THROW(solve_multiple_choice(p), Error);  // negative bytes
  p.bytes = {{1, 2}};
  p.cost = {{1, NAN}};
  EXPECT_THROW(solve_multiple_choice(p), Error);
  p.cost = {{}};
  p.bytes = {{}};
  EXPECT_THROW(solve_multiple_choice(p), Error);
}

TEST(MultipleChoice, SolutionRoundTripsThroughJson) {
  MultipleChoiceProblem p;
  p.cost = {{10, 4}, {8, 1}};
  p.bytes = {{1, 3}, {1, 4}};
  p.budget_bytes = 5;
  const MultipleChoiceSolution s = solve_multiple_choice(p);
  const nlohmann::json j = s;
  const MultipleChoiceSolution r = j.get<MultipleChoiceSolution>();
  EXPECT_EQ(r.choice, s.choice);
  EXPECT_EQ(r.bytes, s.bytes);
  EXPECT_EQ(r.objective, s.objective);
  EXPECT_EQ(r.min_feasible_bytes, s.min_feasible_bytes);
}

// Bytes of one block of `heads` KV heads (K and V, head_dim 64, one fp16 scale and zero per token)
// for 4096 tokens, 129 of them fp16: a stand-in byte table, linear in bits like the cache's.
int64_t block_bytes(int heads, int bits) { return (int64_t)heads * 2 * ((4096 - 129) * (64 * bits / 8 + 4) + 129 * 128); }

void fill_bytes(PmkvqProblem& p, int heads) {
  p.bytes.clear();
  for (size_t i = 0; i < p.sensitivity.size(); ++i) {
    std::vector<int64_t> row;
    for (int b : p.bits) row.push_back(block_bytes(heads, b));
    p.bytes.push_back(row);
  }
}

// PM-KVQ per layer on SmolLM2's shape: 30 layers x {2, 4, 8}, max_len 4096.
PmkvqProblem smollm_pmkvq(std::mt19937& rng, int n_layers, std::vector<int> bits) {
  PmkvqProblem p;
  p.bits = bits;
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (int i = 0; i < n_layers; ++i) {
    std::vector<double> s;
    const double layer_scale = u(rng);
    for (int b : bits) s.push_back(layer_scale * std::pow(4.0, -b) * u(rng));  // ~ 4^-b, noisy
    p.sensitivity.push_back(s);
  }
  fill_bytes(p, 3);
  return p;
}

TEST(PmkvqAllocate, MatchesBruteForceOnSmallModels) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    PmkvqProblem p = smollm_pmkvq(rng, 6, {2, 4, 8});
    const int64_t b2 = block_bytes(3, 2), b8 = block_bytes(3, 8);
    p.budget_bytes = std::uniform_int_distribution<int64_t>(6 * b2, 6 * b8)(rng);
    MultipleChoiceProblem mc;
    mc.budget_bytes = p.budget_bytes;
    for (const auto& s : p.sensitivity) {
      mc.cost.push_back(s);
      mc.bytes.push_back({b2, block_bytes(3, 4), b8});
    }
    const Brute want = brute_force(mc);
    const PmkvqAllocation a = pmkvq_allocate(p);
    int64_t bytes = 0;
    for (int b : a.bits) bytes += block_bytes(3, b);
    EXPECT_EQ(bytes, a.bytes);
    EXPECT_LE(a.bytes, p.budget_bytes);
    EXPECT_NEAR(a.objective, want.objective, kObjectiveTol * 6 * p.sensitivity[0][0]) << seed;
  }
}

TEST(PmkvqAllocate, BudgetAtAverageBitsGivesExpectedCounts) {
  // Equal sensitivities in every layer: the objective only depends on how many layers get each
  // width. With B = {2, 4} and a budget of exactly 10 layers at 4 bits + 20 at 2, the optimum puts
  // exactly 10 layers at 4 bits (an 11th does not fit; fewer leaves sensitivity on the table).
  std::mt19937 rng(7);
  PmkvqProblem p = smollm_pmkvq(rng, 30, {2, 4});
  for (auto& s : p.sensitivity) s = {1.0, 0.25};
  p.budget_bytes = 10 * block_bytes(3, 4) + 20 * block_bytes(3, 2);
  const PmkvqAllocation a = pmkvq_allocate(p);
  EXPECT_EQ(std::count(a.bits.begin(), a.bits.end(), 4), 10);
  EXPECT_EQ(std::count(a.bits.begin(), a.bits.end(), 2), 20);
  EXPECT_EQ(a.bytes, p.budget_bytes);
  EXPECT_DOUBLE_EQ(a.objective, 10 * 0.25 + 20 * 1.0);
}

TEST(PmkvqAllocate, InfeasibleBudgetNamesSmallestFeasible) {
  std::mt19937 rng(3);
  PmkvqProblem p = smollm_pmkvq(rng, 30, {2, 4});
  const int64_t need = 30 * block_bytes(3, 2);
  p.budget_bytes = need - 1;
  try {
    pmkvq_allocate(p);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(need) + " bytes"), std::string::npos) << e.what();
  }
}

TEST(PmkvqAllocate, PerHeadOnFullSmolLmShapeIsQuickAndWithinBudget) {
  // 30 layers x 3 KV heads = 90 components, B = {2, 4, 8}, budget at ~4 bits average.
  std::mt19937 rng(11);
  PmkvqProblem p = smollm_pmkvq(rng, 90, {2, 4, 8});
  fill_bytes(p, 1);
  p.budget_bytes = 90 * block_bytes(1, 4);
  const PmkvqAllocation a = pmkvq_allocate(p);
  EXPECT_LE(a.bytes, p.budget_bytes);
  // Not worse than the uniform 4-bit allocation, which is feasible.
  double uniform = 0;
  for (const auto& s : p.sensitivity) uniform += s[1];
  EXPECT_LE(a.objective, uniform * (1 + kObjectiveTol));
  const nlohmann::json j = a;
  EXPECT_EQ(j.get<PmkvqAllocation>().bits, a.bits);
}

TEST(PmkvqAllocate, RejectsBadInput) {
  std::mt19937 rng(5);
  PmkvqProblem p = smollm_pmkvq(rng, 4, {2, 4});
  p.budget_bytes = 1 << 30;
  PmkvqProblem q = p;
  q.bits = {};
  EXPECT_THROW(pmkvq_allocate(q), Error);
  q = p;
  q.bits = {2, 2};
  q.sensitivity = {{1, 1}};
  EXPECT_THROW(pmkvq_allocate(q), Error);
  q = p;
  q.sensitivity[1].push_back(0.0);
  EXPECT_THROW(pmkvq_allocate(q), Error);
  q = p;
  q.bytes.pop_back();  // a component without byte counts
  EXPECT_THROW(pmkvq_allocate(q), Error);
  q = p;
  q.bytes[0][0] = -1;
  EXPECT_THROW(pmkvq_allocate(q), Error);
}

}  // namespace
}  // namespace mpkv

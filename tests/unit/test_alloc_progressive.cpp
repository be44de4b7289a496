// mpkv's combined allocation: RateQuant's final bits on the 16 -> 8 -> 4 -> 2 ladder.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "alloc/progressive_schedule.h"
#include "util/error.h"

namespace mpkv {
namespace {

TEST(ProgressiveSchedule, LaddersByHand) {
  // 1 layer, 2 KV heads: order (h0 K, h0 V, h1 K, h1 V).
  const ProgressiveSchedule s = progressive_schedule(1, 2, {2, 4, 8, 16});
  ASSERT_EQ(s.components.size(), 4u);
  EXPECT_EQ(s.start_bits, 16);
  EXPECT_EQ(s.components[0].ladder, (std::vector<int>{16, 8, 4, 2}));
  EXPECT_EQ(s.components[1].ladder, (std::vector<int>{16, 8, 4}));
  EXPECT_EQ(s.components[2].ladder, (std::vector<int>{16, 8}));
  EXPECT_EQ(s.components[3].ladder, (std::vector<int>{16}));
  EXPECT_EQ(s.components[1].kv, 1);
  EXPECT_EQ(s.components[2].head, 1);
  EXPECT_EQ(s.components[2].kv, 0);
  EXPECT_EQ(s.components[3].final_bits, 16);
}

TEST(ProgressiveSchedule, ComponentIndexOrder) {
  EXPECT_EQ(kv_component_index(0, 0, 0, 3), 0u);
  EXPECT_EQ(kv_component_index(0, 0, 1, 3), 1u);
  EXPECT_EQ(kv_component_index(0, 2, 1, 3), 5u);
  EXPECT_EQ(kv_component_index(1, 0, 0, 3), 6u);
  EXPECT_EQ(kv_component_index(29, 2, 1, 3), 179u);  // SmolLM2's last component
  const ProgressiveSchedule s = progressive_schedule(2, 3, std::vector<int>(12, 4));
  EXPECT_EQ(s.components[kv_component_index(1, 2, 0, 3)].layer, 1);
  EXPECT_EQ(s.components[kv_component_index(1, 2, 0, 3)].head, 2);
}

TEST(ProgressiveSchedule, RejectsFinalsOffTheLadderAndSizeMismatch) {
  try {
    progressive_schedule(1, 1, {4, 3});  // V at 3 bits: 4 -> 3 is no halving shift
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("head 0 V has final 3 bits"), std::string::npos) << m;
  }
  EXPECT_THROW(progressive_schedule(1, 1, {4, 1}), Error);
  EXPECT_THROW(progressive_schedule(1, 1, {4, 6}), Error);
  EXPECT_THROW(progressive_schedule(1, 2, {4, 4}), Error);
  EXPECT_THROW(progressive_schedule(0, 2, {}), Error);
}

RateQuantProblem smollm_problem(double avg, uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> lw(0.0, 1.5);
  RateQuantProblem p;
  for (int i = 0; i < 30 * 3 * 2; ++i) {
    const bool value = i % 2;
    p.components.push_back({lw(rng), value ? DistortionModel{0.02, 4.4} : DistortionModel{0.5, 3.9}});
  }
  p.avg_bits = avg;
  p.min_bits = 2;
  p.max_bits = 8;
  return p;
}

TEST(CombinedAllocate, FinalsAreLadderWidthsWithinBudget) {
  for (double avg : {2.0, 2.5, 3.0, 4.0}) {
    const RateQuantProblem p = smollm_problem(avg, 3);
    const CombinedAllocation a = combined_allocate(p, 30, 3);
    EXPECT_EQ(a.ratequant.integerization, "knapsack");
    EXPECT_EQ(a.ratequant.allowed_bits, (std::vector<int>{2, 4, 8}));
    EXPECT_LE(a.ratequant.bit_sum, a.ratequant.bit_budget);
    ASSERT_EQ(a.schedule.components.size(), 180u);
    for (size_t i = 0; i < 180; ++i) {
      const ProgressiveComponent& c = a.schedule.components[i];
      EXPECT_EQ(c.final_bits, a.ratequant.bits[i]);
      EXPECT_TRUE(c.final_bits == 2 || c.final_bits == 4 || c.final_bits == 8) << c.final_bits;
      EXPECT_EQ(c.ladder.front(), 16);
      EXPECT_EQ(c.ladder.back(), c.final_bits);
    }
    // Restricting to the ladder costs distortion against the contiguous greedy, never gains.
    const RateQuantResult free = ratequant_allocate(p);
    EXPECT_GE(a.ratequant.objective, free.objective * (1 - 1e-12)) << avg;
  }
}

TEST(CombinedAllocate, AtTwoBitsEveryoneIsAtTwo) {
  // b_avg = 2 = the lowest ladder width: 360 bits for 180 components, nothing to spare.
  const CombinedAllocation a = combined_allocate(smollm_problem(2.0, 5), 30, 3);
  for (int b : a.ratequant.bits) EXPECT_EQ(b, 2);
  for (const auto& c : a.schedule.components) EXPECT_EQ(c.ladder, (std::vector<int>{16, 8, 4, 2}));
}

TEST(CombinedAllocate, RejectsTurboAndWrongShapes) {
  RateQuantProblem p = smollm_problem(3.0, 1);
  EXPECT_THROW(combined_allocate(p, 30, 2), Error);
  p.min_max_quantizer = false;
  EXPECT_THROW(combined_allocate(p, 30, 3), Error);
  p = smollm_problem(5.0, 1);
  p.min_bits = 5;
  p.max_bits = 7;  // no ladder width in [5, 7]
  EXPECT_THROW(combined_allocate(p, 30, 3), Error);
}

TEST(CombinedAllocate, RoundTripsThroughJson) {
  const CombinedAllocation a = combined_allocate(smollm_problem(3.0, 2), 30, 3);
  const nlohmann::json j = a;
  EXPECT_EQ(j["schedule"]["components"][1]["kv"], "V");
  const CombinedAllocation b = j.get<CombinedAllocation>();
  EXPECT_EQ(b.ratequant.bits, a.ratequant.bits);
  ASSERT_EQ(b.schedule.components.size(), a.schedule.components.size());
  for (size_t i = 0; i < a.schedule.components.size(); ++i) {
    EXPECT_EQ(b.schedule.components[i].ladder, a.schedule.components[i].ladder);
    EXPECT_EQ(b.schedule.components[i].kv, a.schedule.components[i].kv);
  }
  nlohmann::json bad = j;
  bad["schedule"]["components"][0]["kv"] = "Q";
  EXPECT_THROW(bad.get<CombinedAllocation>(), Error);
}

}  // namespace
}  // namespace mpkv

// engine/phase_time.h: the prefill / decode split of steps' wall time by token share.
#include <gtest/gtest.h>

#include "engine/phase_time.h"

namespace mpkv {
namespace {

TEST(PhaseTime, MixedStepsAreSplitByTokenShareAndAddUpToTheWallTime) {
  // A pure prefill step, a mixed step (3 prompt tokens + 1 decode token), two pure decode steps,
  // and an empty step (no tokens: nothing booked).
  const std::vector<StepTime> steps = {{8, 0, 0.4}, {3, 1, 0.4}, {0, 2, 0.1}, {0, 2, 0.1}, {0, 0, 0.5}};
  const PhaseSeconds p = split_phase_seconds(steps);
  EXPECT_DOUBLE_EQ(p.prefill, 0.4 + 0.3);
  EXPECT_DOUBLE_EQ(p.decode, 0.1 + 0.1 + 0.1);
  EXPECT_DOUBLE_EQ(p.prefill + p.decode, 0.4 + 0.4 + 0.1 + 0.1);  // the steps that forwarded tokens
  EXPECT_EQ(p.prefill_tokens, 11);
  EXPECT_EQ(p.decode_tokens, 5);
  // 5 / 0.3 tok/s; booking the mixed step to prefill would have said 4 / 0.2 = 20.
  EXPECT_NEAR(p.decode_tokens / p.decode, 16.6667, 1e-3);
  EXPECT_NEAR(p.prefill_tokens / p.prefill, 15.7143, 1e-3);
}

TEST(PhaseTime, ManyMixedStepsSumToTheirWallTime) {
  std::vector<StepTime> steps;
  double wall = 0.0;
  for (int i = 0; i < 1000; ++i) {
    steps.push_back({i % 7, 1 + i % 3, 0.001 * (1 + i % 11)});
    wall += steps.back().seconds;
  }
  const PhaseSeconds p = split_phase_seconds(steps);
  EXPECT_NEAR(p.prefill + p.decode, wall, 1e-12);
  EXPECT_GT(p.prefill, 0.0);
  EXPECT_GT(p.decode, 0.0);
}

}  // namespace
}  // namespace mpkv

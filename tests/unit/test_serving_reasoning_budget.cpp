// The thinking budget (engine/reasoning_budget.h): the state machine on its own, then in the engine
// on the tiny synthetic model, where the forced end tag must appear right after `budget` tokens of
// a greedy request whose other tokens are those of the same request without a budget.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/reasoning_budget.h"
#include "fixtures/engine_tiny.h"
#include "kvcache/kv_cache_factory.h"

namespace mpkv {
namespace {

// Feeds `tokens` (sampled ones; a forced token replaces its position) and returns what was emitted.
std::vector<int32_t> run(ReasoningBudget b, const std::vector<int32_t>& sampled) {
  std::vector<int32_t> out;
  for (int32_t t : sampled) {
    const int32_t e = b.forced().value_or(t);
    out.push_back(e);
    b.accept(e);
  }
  return out;
}

ReasoningBudgetParams params(int budget, bool inside) {
  ReasoningBudgetParams p;
  p.budget = budget;
  p.start = {100};
  p.end = {200, 201};
  p.starts_inside = inside;
  return p;
}

TEST(ReasoningBudget, ForcesTheEndTagAfterTheBudget) {
  EXPECT_EQ(run(ReasoningBudget(params(3, true)), {1, 2, 3, 4, 5, 6}), (std::vector<int32_t>{1, 2, 3, 200, 201, 6}));
  // Outside until the start tag; the tag itself is not counted.
  EXPECT_EQ(run(ReasoningBudget(params(2, false)), {1, 100, 2, 3, 4, 5, 6}), (std::vector<int32_t>{1, 100, 2, 3, 200, 201, 6}));
  // Budget 0: the end tag at once.
  EXPECT_EQ(run(ReasoningBudget(params(0, true)), {1, 2, 3}), (std::vector<int32_t>{200, 201, 3}));
  // The model closing the block itself ends the budget: nothing is forced later.
  EXPECT_EQ(run(ReasoningBudget(params(4, true)), {1, 200, 201, 4, 5, 6, 7}), (std::vector<int32_t>{1, 200, 201, 4, 5, 6, 7}));
  // Off (-1), and without an end tag.
  EXPECT_EQ(run(ReasoningBudget(params(-1, true)), {1, 2, 3}), (std::vector<int32_t>{1, 2, 3}));
  ReasoningBudgetParams no_end = params(1, true);
  no_end.end.clear();
  EXPECT_EQ(run(ReasoningBudget(no_end), {1, 2, 3}), (std::vector<int32_t>{1, 2, 3}));
}

TEST(ReasoningBudget, EngineForcesTheTagAndKeepsTheOtherTokens) {
  const test::EngineTiny& f = test::engine_tiny();
  auto tokens_of = [&](const RequestParams& r) {
    EngineOptions e;
    e.n_ctx = 256;
    Engine eng(*f.model, *f.tok, make_kv_cache(KvCacheOptions{}, f.dims), e);
    std::vector<int32_t> out;
    eng.add_request(r, [&](const RequestOutput& o) { out.insert(out.end(), o.tokens.begin(), o.tokens.end()); });
    eng.run_until_idle();
    return out;
  };
  RequestParams r;
  r.prompt = test::engine_prompt(3, 12);
  r.max_tokens = 12;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  const std::vector<int32_t> free = tokens_of(r);
  ASSERT_EQ(free.size(), 12u);
  // End tokens the free run does not produce in its first 5, so the budget is what ends the block.
  ReasoningBudgetParams b;
  b.budget = 5;
  b.starts_inside = true;
  for (int32_t t = 3; b.end.size() < 2; ++t)
    if (std::find(free.begin(), free.begin() + 5, t) == free.begin() + 5) b.end.push_back(t);
  r.reasoning_budget = b;
  const std::vector<int32_t> forced = tokens_of(r);
  ASSERT_EQ(forced.size(), 12u);
  EXPECT_EQ(std::vector<int32_t>(forced.begin(), forced.begin() + 5), std::vector<int32_t>(free.begin(), free.begin() + 5));
  EXPECT_EQ(forced[5], b.end[0]);
  EXPECT_EQ(forced[6], b.end[1]);
}

}  // namespace
}  // namespace mpkv

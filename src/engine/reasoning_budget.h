// A thinking budget (docs/serving.md, "Reasoning"; llama-server's --reasoning-budget): once a
// request has generated `budget` tokens inside its thinking block, the block's end tag is forced,
// token by token, instead of sampled, and the answer continues after it. A block starts with the
// `start` token sequence in the output (or at once, when the prompt opened it) and ends early when
// the model writes `end` itself. Token sequences are matched on ids, as llama.cpp's budget
// sampler does: an end tag the model spells in other tokens is not seen.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace mpkv {

struct ReasoningBudgetParams {
  int budget = -1;              // -1: no budget; 0: the end tag as soon as the block opens
  std::vector<int32_t> start;   // "<think>" as tokens
  std::vector<int32_t> end;     // "</think>" as tokens; forced when the budget is spent
  bool starts_inside = false;   // the prompt opened the block
  bool active() const { return budget >= 0 && !end.empty(); }
};

class ReasoningBudget {
 public:
  ReasoningBudget() = default;
  explicit ReasoningBudget(ReasoningBudgetParams p);
  // The token to emit instead of sampling (while the end tag is being forced).
  std::optional<int32_t> forced() const;
  // Every emitted token, sampled or forced, in order.
  void accept(int32_t token);

 private:
  enum class State : uint8_t { off, idle, counting, forcing, done };
  bool ends_with(const std::vector<int32_t>& seq) const;

  ReasoningBudgetParams p_;
  State state_ = State::off;
  int counted_ = 0;                 // tokens inside the block so far
  size_t forced_ = 0;               // tokens of `end` already forced
  std::vector<int32_t> recent_;     // the last tokens, as many as the longer tag
};

}  // namespace mpkv

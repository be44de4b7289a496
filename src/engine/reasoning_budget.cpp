#include "engine/reasoning_budget.h"

#include <algorithm>

namespace mpkv {

ReasoningBudget::ReasoningBudget(ReasoningBudgetParams p) : p_(std::move(p)) {
  if (!p_.active()) return;
  state_ = p_.starts_inside || p_.start.empty() ? State::counting : State::idle;
  if (state_ == State::counting && p_.budget == 0) state_ = State::forcing;
}

std::optional<int32_t> ReasoningBudget::forced() const {
  if (state_ != State::forcing) return std::nullopt;
  return p_.end[forced_];
}

bool ReasoningBudget::ends_with(const std::vector<int32_t>& seq) const {
  return !seq.empty() && recent_.size() >= seq.size() && std::equal(seq.rbegin(), seq.rend(), recent_.rbegin());
}

void ReasoningBudget::accept(int32_t token) {
  if (state_ == State::off || state_ == State::done) return;
  recent_.push_back(token);
  const size_t keep = std::max(p_.start.size(), p_.end.size());
  if (recent_.size() > keep) recent_.erase(recent_.begin(), recent_.end() - static_cast<std::ptrdiff_t>(keep));
  switch (state_) {
    case State::idle:
      if (ends_with(p_.start)) state_ = p_.budget == 0 ? State::forcing : State::counting;
      break;
    case State::counting:
      if (ends_with(p_.end)) {
        state_ = State::done;
      } else if (++counted_ >= p_.budget) {
        state_ = State::forcing;
      }
      break;
    case State::forcing:
      if (++forced_ == p_.end.size()) state_ = State::done;
      break;
    case State::off:
    case State::done: break;
  }
}

}  // namespace mpkv

#include "grammar/token_matcher.h"

#include <xgrammar/matcher.h>

#include "util/error.h"

namespace mpkv {

struct TokenMatcher::Impl {
  explicit Impl(const CompiledConstraint& g)
      : matcher(g.grammar, std::nullopt, /*terminate_without_stop_token=*/false, /*max_rollback_tokens=*/0) {}
  xgrammar::GrammarMatcher matcher;
};

TokenMatcher::TokenMatcher(std::shared_ptr<const CompiledConstraint> grammar) {
  MPKV_ASSERT(grammar != nullptr, "TokenMatcher: no compiled grammar");
  vocab_size_ = grammar->vocab_size;
  never_allowed_ = grammar->never_allowed;
  accepts_before_mask_ = !grammar->token_budgets;
  impl_ = std::make_unique<Impl>(*grammar);
  // xgrammar's bitmask: int32 words, bit i of word w is token 32 w + i (its GetBitmaskSize).
  mask_.assign(xgrammar::GetBitmaskSize(vocab_size_), 0u);
}

TokenMatcher::~TokenMatcher() = default;

void TokenMatcher::fill_mask() {
  int64_t shape[1] = {static_cast<int64_t>(mask_.size())};
  DLTensor t{};
  t.data = mask_.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&t);
}

bool TokenMatcher::allowed(int32_t t) const {
  return t >= 0 && t < vocab_size_ && ((mask_[t >> 5] >> (t & 31)) & 1u);
}

bool TokenMatcher::accept(int32_t t) {
  if (t < 0 || t >= vocab_size_) return false;
  if (never_allowed_ && (((*never_allowed_)[t >> 5] >> (t & 31)) & 1u)) return false;  // xgrammar would log it
  return impl_->matcher.AcceptToken(t);
}

bool TokenMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace mpkv

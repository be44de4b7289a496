#include "engine/grammar_gate.h"

#include <algorithm>

namespace mpkv {

GrammarGate::GrammarGate(std::vector<int32_t> tag, const std::vector<int32_t>& ending, int n_vocab)
    : tag_(std::move(tag)), mask_((size_t)(n_vocab + 31) / 32, ~0u) {
  for (int32_t t : ending)
    if (t >= 0 && t < n_vocab) mask_[t >> 5] &= ~(1u << (t & 31));
}

void GrammarGate::accept(int32_t token) {
  if (open()) return;
  recent_.push_back(token);
  if (recent_.size() > tag_.size()) recent_.erase(recent_.begin());
  if (recent_ == tag_) seen_ = true;
}

}  // namespace mpkv

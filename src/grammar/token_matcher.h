// One request's walk through its compiled constraint (docs/structured_outputs.md, "Masks"): the
// mask of the tokens the grammar allows next, and the state advanced by every accepted token.
// Stop tokens (the tokenizer's end-of-generation ids) are in the mask only where the grammar may
// end; once one is accepted the matcher is terminated. Not thread-safe: one thread at a time (the
// engine fills the masks of a step's rows on its pool, one row per task).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/compiled_constraint.h"

namespace mpkv {

class TokenMatcher {
 public:
  explicit TokenMatcher(std::shared_ptr<const CompiledConstraint> grammar);
  ~TokenMatcher();
  TokenMatcher(const TokenMatcher&) = delete;
  TokenMatcher& operator=(const TokenMatcher&) = delete;

  // Computes the mask for the next token: bit (t % 32) of word t / 32 set = token t allowed, for
  // t in [0, vocab_size()).
  void fill_mask();
  const uint32_t* mask() const { return mask_.data(); }
  bool allowed(int32_t t) const;
  // Advances by token t; false (and nothing changes) when the grammar does not allow it. It needs
  // no mask: a token is accepted exactly when the mask for this position would allow it (stop
  // tokens only where the grammar may end, special tokens never), except in a grammar with token
  // budgets (accepts_before_mask).
  bool accept(int32_t t);
  // accept(t) without this position's mask filled first gives what it gives after the fill
  // (docs/structured_outputs.md, "Masks in the engine": check-first sampling). False for grammars
  // whose rules carry token budgets (CompiledConstraint::token_budgets).
  bool accepts_before_mask() const { return accepts_before_mask_; }
  bool terminated() const;  // a stop token was accepted: nothing more may follow
  int vocab_size() const { return vocab_size_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<uint32_t> mask_;
  int vocab_size_;
  std::shared_ptr<const std::vector<uint32_t>> never_allowed_;  // may be null: none
  bool accepts_before_mask_;
};

}  // namespace mpkv

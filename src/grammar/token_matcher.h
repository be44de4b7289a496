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
  // Advances by token t; false (and nothing changes) when the grammar does not allow it.
  bool accept(int32_t t);
  bool terminated() const;  // a stop token was accepted: nothing more may follow
  int vocab_size() const { return vocab_size_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<uint32_t> mask_;
  int vocab_size_;
};

}  // namespace mpkv

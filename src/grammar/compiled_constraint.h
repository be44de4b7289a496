// A constraint compiled for one vocabulary (xgrammar's CompiledGrammar: the grammar and its
// precomputed token masks), shared read-only by every request that uses it; each request walks it
// with its own TokenMatcher (token_matcher.h).
#pragma once
#include <xgrammar/compiler.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/constraint.h"

namespace mpkv {

struct CompiledConstraint {
  Constraint source;
  xgrammar::CompiledGrammar grammar;
  int vocab_size = 0;          // the mask's width in tokens (the model's logits width)
  double compile_seconds = 0;  // how long its compilation took
  // The tokens xgrammar's vocabulary calls special that are not stop tokens (never allowed; bit
  // t % 32 of word t / 32), the same for every grammar of one compiler: TokenMatcher::accept refuses
  // them before xgrammar sees them, which would log a warning for each.
  std::shared_ptr<const std::vector<uint32_t>> never_allowed;
  // A rule carries a token budget (xgrammar's `[max_tokens=N]` rule attribute, only reachable
  // through a grammar constraint's EBNF): there filling a mask decides what the next accept does,
  // so no token may be accepted before its mask (TokenMatcher::accepts_before_mask).
  bool token_budgets = false;
};

}  // namespace mpkv

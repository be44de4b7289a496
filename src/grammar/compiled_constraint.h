// A constraint compiled for one vocabulary (xgrammar's CompiledGrammar: the grammar and its
// precomputed token masks), shared read-only by every request that uses it; each request walks it
// with its own TokenMatcher (token_matcher.h).
#pragma once
#include <xgrammar/compiler.h>

#include "grammar/constraint.h"

namespace mpkv {

struct CompiledConstraint {
  Constraint source;
  xgrammar::CompiledGrammar grammar;
  int vocab_size = 0;          // the mask's width in tokens (the model's logits width)
  double compile_seconds = 0;  // how long its compilation took
};

}  // namespace mpkv

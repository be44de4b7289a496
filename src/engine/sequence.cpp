#include "engine/sequence.h"

#include <algorithm>

namespace mpkv {

Sequence::Sequence(uint64_t id_, RequestParams p, OutputCallback cb)
    : id(id_), params(std::move(p)), on_output(std::move(cb)), sampler(params.sampling),
      reasoning_budget(params.reasoning_budget), text(params.stop),
      tokens(params.prompt), n_prompt((int)params.prompt.size()), arrived(Clock::now()) {
  stats.n_prompt_tokens = n_prompt;
  // The prompt joins the repetition-penalty history, as in llama.cpp (llama-cli and llama-server
  // accept every prompt token into the sampler), so the first generated token is already penalized.
  // A preempted sequence keeps this object and its sampler, so recompute does not add them twice.
  for (int32_t t : params.prompt) sampler.accept(t);
  if (params.grammar) matcher = std::make_unique<TokenMatcher>(params.grammar);
}

bool Sequence::accept_constrained(int32_t t) {
  if (!matcher) return true;
  if (!grammar_gate.open()) {
    grammar_gate.accept(t);
    return true;
  }
  return matcher->accept(t);
}

int Sequence::max_positions(int n_ctx) const {
  if (params.max_tokens < 0) return n_ctx;
  return (int)std::min<int64_t>((int64_t)n_prompt + params.max_tokens, n_ctx);
}

double Sequence::seconds_since_arrival() const {
  return std::chrono::duration<double>(Clock::now() - arrived).count();
}

}  // namespace mpkv

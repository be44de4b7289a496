// One request inside the engine (engine.h): its tokens, sampler, stop rules and progress.
//
// tokens = prompt, then generated tokens. The KV cache holds positions [0, n_cached); the tokens
// after that still have to go through the forward pass. More than one uncached token: the
// sequence is prefilling (its prompt, or everything again after a preemption); exactly one: it
// decodes (the last sampled token). The logits of the last token sample the next one.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/grammar_gate.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"
#include "grammar/token_matcher.h"

namespace mpkv {

enum class SeqStatus : uint8_t { waiting, running, finished };

struct Sequence {
  using Clock = std::chrono::steady_clock;

  Sequence(uint64_t id, RequestParams params, OutputCallback on_output);

  uint64_t id;
  RequestParams params;
  OutputCallback on_output;
  Sampler sampler;
  ReasoningBudget reasoning_budget;  // forces the end of thinking (params.reasoning_budget)
  TextStream text;
  std::vector<int32_t> tokens;
  int n_prompt = 0;
  int n_cached = 0;
  int cache_slot = -1;  // sequence id in the KvCache while running
  size_t projected_bytes = 0;  // its share of admission's projection while running (Scheduler)
  SeqStatus status = SeqStatus::waiting;
  FinishReason reason = FinishReason::none;
  bool abort_requested = false;
  RequestStats stats;
  Clock::time_point arrived;
  bool scheduled_once = false, produced_token = false;
  std::vector<TokenLogprobs> prompt_logprobs;  // collected chunk by chunk until the first token (params.prompt_logprobs)
  // params.grammar's state, advanced by every generated token (kept across a preemption, like the
  // sampler: the recomputed tokens are already in it). Null when unconstrained.
  std::unique_ptr<TokenMatcher> matcher;
  // Where the grammar starts (params.grammar_after; open without one). Set by the engine, which
  // knows the ids that end an output.
  GrammarGate grammar_gate;

  // The mask this step's token is sampled under: null when unconstrained, the gate's while it is
  // closed, else the matcher's (filled for this step).
  const uint32_t* sampling_mask() const {
    return !matcher ? nullptr : grammar_gate.open() ? matcher->mask() : grammar_gate.mask();
  }
  // The grammar's matcher fills a mask this step (constrained, past the gate).
  bool grammar_active() const { return matcher && grammar_gate.open(); }
  // Advances the gate or the matcher by an emitted token; false when the grammar refuses it.
  bool accept_constrained(int32_t t);
  int n_generated() const { return (int)tokens.size() - n_prompt; }
  int n_uncached() const { return (int)tokens.size() - n_cached; }
  bool prefilling() const { return n_uncached() > 1; }
  // Its prompt's logits are wanted at every position (params.prompt_logprobs): its prompt tokens
  // must go through the forward pass, not come from a prefix cache.
  bool needs_prompt_logits() const { return params.prompt_logprobs >= 0; }
  // Position k's logits are still wanted for the prompt's logprobs: k predicts prompt token k + 1,
  // and positions already collected (before a preemption) are not collected again.
  bool wants_prompt_logits_at(int k) const {
    return needs_prompt_logits() && !produced_token && k + 1 < n_prompt && k >= (int)prompt_logprobs.size();
  }
  // Positions this request can reach: prompt + max_tokens, at most n_ctx (admission projects this).
  int max_positions(int n_ctx) const;
  double seconds_since_arrival() const;
};

}  // namespace mpkv

// What a client asks the engine for, and what the engine tells it back (docs/serving.md).
//
// A request is a tokenized prompt plus sampling and stop rules. The engine answers with a stream
// of RequestOutput events on its stepping thread: one per step in which the request produced
// tokens, and exactly one final event (finished = true) carrying the finish reason and the
// request's timings. Text is detokenized in the engine so stop strings end a sequence (and free
// its pages) as soon as they appear; text_delta never holds a partial UTF-8 character nor text
// that might still turn out to be the start of a stop string.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/reasoning_budget.h"
#include "engine/sampler.h"

namespace mpkv {

struct CompiledConstraint;  // grammar/compiled_constraint.h

// Why a request ended. The names of to_string() are OpenAI's finish_reason values where one exists.
enum class FinishReason : uint8_t {
  none,     // still running
  stop,     // end-of-generation token or a stop string
  length,   // max_tokens generated
  context,  // the sequence filled the context (n_ctx); reported as "length" to OpenAI clients
  abort,    // abort() (client gone, shutdown)
};
const char* to_string(FinishReason r);

// The limits every prompt must keep, in one place: the engine refuses a request that breaks them
// (Engine::add_request), and the server asks the same question first so that its client gets a 400
// naming the field (src/server/api_handler.cpp). A prompt is not empty, leaves room in the context
// for at least one generated token (size < n_ctx), and holds only ids in [0, n_vocab).
struct PromptCheck {
  enum class Problem : uint8_t { none, empty, too_long, bad_token };
  Problem problem = Problem::none;
  int32_t bad_token = 0;  // the first id outside [0, n_vocab) (Problem::bad_token)
};
PromptCheck check_prompt(const std::vector<int32_t>& prompt, int n_ctx, int n_vocab);
inline bool token_id_valid(int32_t id, int n_vocab) { return id >= 0 && id < n_vocab; }

struct RequestParams {
  std::vector<int32_t> prompt;      // token ids; non-empty and shorter than the engine's n_ctx
  int max_tokens = 128;             // >= 1; -1: until end of generation or the context is full
  SamplerOptions sampling;
  std::vector<std::string> stop;    // stop strings, matched on the detokenized output (not returned)
  bool ignore_eos = false;          // keep going past end-of-generation tokens
  int min_tokens = 0;               // 0..max_tokens: end-of-generation tokens do not stop the request
                                    // before min_tokens tokens came before them, nor stop strings
                                    // before min_tokens tokens are out (vLLM's rule; docs/serving.md)
  int top_logprobs = -1;            // -1: no logprobs; 0..kMaxTopLogprobs: the sampled token's logprob
                                    // and that many most likely alternatives per token
  std::vector<int32_t> stop_token_ids;  // more tokens that end the request like end-of-generation
                                        // ones (not shown; min_tokens applies; ignore_eos does not)
  int priority = 0;                 // waiting-queue order: lower first, arrival order among equals
                                    // (vLLM's rule; running requests are never displaced)
  int prompt_logprobs = -1;         // -1: off; 0..kMaxTopLogprobs: each prompt token's logprob given
                                    // the tokens before it, and that many alternatives, in the first
                                    // event (vLLM's prompt_logprobs; costs a logits row per prompt token)
  ReasoningBudgetParams reasoning_budget;  // thinking budget (reasoning_budget.h); off by default
  // Structured output (docs/structured_outputs.md): every generated token is one the grammar allows,
  // and end-of-generation only where it may end (then FinishReason::stop). Null: unconstrained.
  // Compiled for the engine's vocabulary (GrammarCompiler); min_tokens and ignore_eos must be off.
  std::shared_ptr<const CompiledConstraint> grammar;
  // With a grammar: it starts after these token ids in the output (the end-of-thinking tag, when
  // the prompt opened a thinking block); before them the tokens are free text that may not end
  // (engine/grammar_gate.h). Empty: the grammar governs from the first token.
  std::vector<int32_t> grammar_after;
};
inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // natural log of the softmax probability of the raw logits (temperature 1)
};
struct TokenLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;  // most likely first
};

// Figures of one request, complete in its final event (seconds since add_request unless said).
struct RequestStats {
  int n_prompt_tokens = 0;
  int n_generated = 0;
  int n_preemptions = 0;        // times its pages were freed and its tokens recomputed
  int n_cached_prompt_tokens = 0;  // prompt positions read from the prefix cache when first scheduled
  double queue_seconds = 0.0;   // until first scheduled
  double first_token_seconds = 0.0;
  double total_seconds = 0.0;
};

struct RequestOutput {
  uint64_t id = 0;
  std::vector<int32_t> tokens;          // tokens generated in this step (usually one; none in the final
                                        // event of an aborted request)
  std::string text_delta;               // text now safe to show (see the header comment)
  std::vector<TokenLogprobs> logprobs;  // one per entry of `tokens` when top_logprobs >= 0
  // With prompt_logprobs >= 0, in the event of the first generated token only: prompt tokens
  // 1..n_prompt-1, each given the ones before it (the first prompt token has none).
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::none;
  RequestStats stats;                   // complete when finished
};

// Called on the engine's stepping thread; must not call back into the engine's step().
using OutputCallback = std::function<void(const RequestOutput&)>;

}  // namespace mpkv

// Prefill-then-decode generation for one or more sequences sharing a KV cache.
// Each prompt is prefilled in chunks; then every active sequence decodes one token per step, all
// in one batch, until it emits an end-of-generation token, reaches n_predict, or fills n_ctx.
// Before every forward pass each sequence asks the cache to reserve() room for its tokens; a
// prefill chunk that does not fit is retried in halves, and a sequence whose tokens cannot fit
// at all stops with "kv_budget" (the others go on untouched). Finished sequences are removed
// from the cache (freeing their share of a budget) unless keep_finished is set.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/forward.h"
#include "tokenizer/tokenizer.h"

namespace mpkv {

struct GenerateOptions {
  int n_predict = 128;      // tokens to generate per sequence (-1: until end of generation or n_ctx)
  int n_ctx = 4096;         // prompt + generated tokens per sequence
  int prefill_chunk = 512;  // prompt tokens per forward call
  bool stop_at_eog = true;
  bool keep_finished = false;  // leave finished sequences in the cache
  SamplerOptions sampling;
};

struct SequenceResult {
  std::vector<int32_t> tokens;  // generated ids
  std::string stop_reason;      // "eog", "n_predict", "n_ctx", "kv_budget"
};

struct GenerateStats {
  int n_prompt_tokens = 0;
  int n_generated = 0;       // sampled tokens (the first of each sequence comes from prefill logits)
  int n_decoded = 0;         // tokens run through decode forward passes
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int n_kv_budget_stops = 0;  // sequences stopped because their tokens could not fit the KV budget
  double prefill_tok_s() const { return prefill_seconds > 0 ? n_prompt_tokens / prefill_seconds : 0.0; }
  double decode_tok_s() const { return decode_seconds > 0 ? n_decoded / decode_seconds : 0.0; }
};

// Called for each new token of sequence `seq` (index into prompts) as it is generated.
using TokenCallback = std::function<void(int seq, int32_t token)>;
// Called when sequence `seq` stops, before the cache frees it.
using FinishCallback = std::function<void(int seq, const SequenceResult& result)>;

// Validates every prompt (non-empty, shorter than n_ctx) before any work starts; throws Error.
std::vector<SequenceResult> generate(const Model& model, const Tokenizer& tok, KvCache& cache,
                                     const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opts,
                                     GenerateStats& stats, const TokenCallback& on_token = {},
                                     const FinishCallback& on_finish = {});

}  // namespace mpkv

// Perplexity with llama.cpp's protocol (examples/perplexity): the token stream is cut into
// windows of n_ctx tokens (BOS replaces the first token of a window when the model adds BOS);
// each window is evaluated from an empty cache and only its second half is scored: the logits at
// positions [n_ctx/2, n_ctx-1) predict the tokens that follow them. PPL = exp(mean NLL), and the
// standard error is PPL * sqrt(var(NLL) / (count - 1)), as llama.cpp prints it.
// A window is prefilled in chunks of at most `batch` tokens, each reserved in the cache first and
// halved while the cache cannot reserve it (engine/ModelRunner::prefill), so a budgeted progressive cache
// shrinks pages between chunks instead of needing the whole window at 16 bits at once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/forward.h"

namespace mpkv {

class PagedKvCache;

struct PerplexityOptions {
  int n_ctx = 512;
  int max_chunks = -1;  // -1: every full window of the text
  int batch = 512;      // tokens per forward call when prefilling a window (halved under a budget)
  bool add_bos = false;
  int32_t bos = -1;
  bool progress = true;
};

struct PerplexityResult {
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  double mean_nll = 0.0;
  int64_t n_scored = 0;
  int n_chunks = 0;
  int64_t n_tokens_used = 0;  // n_chunks * n_ctx
  std::vector<double> nll;    // per scored token, in order
  double seconds = 0.0;
};

// Makes a fresh KV cache for each window (kvcache/kv_cache_factory.h's make_kv_cache).
using KvCacheFactory = std::function<std::unique_ptr<PagedKvCache>()>;

// Throws Error when the text holds less than one full window of n_ctx tokens, or when the cache
// cannot reserve even one more token of a window (its budget is too small for n_ctx).
PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& tokens, const PerplexityOptions& opts,
                            const KvCacheFactory& make_cache);

// log-softmax NLL of `target` under `logits` [n_vocab], computed in double.
double token_nll(const float* logits, int n_vocab, int32_t target);

}  // namespace mpkv

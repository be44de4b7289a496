#include "eval/perplexity.h"

#include <chrono>
#include <cmath>

#include "kvcache/paged_kv_cache.h"
#include "util/error.h"
#include "util/progress.h"

namespace mpkv {

double token_nll(const float* logits, int n_vocab, int32_t target) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp((double)logits[i] - mx);
  return std::log(sum) + mx - (double)logits[target];
}

PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& tokens, const PerplexityOptions& opts,
                            const KvCacheFactory& make_cache) {
  MPKV_CHECK(opts.n_ctx >= 8, "perplexity: context must be at least 8 tokens");
  const int64_t available = (int64_t)tokens.size() / opts.n_ctx;
  MPKV_CHECK(available >= 1, "perplexity: the text has " + std::to_string(tokens.size()) +
                                 " tokens, fewer than one window of " + std::to_string(opts.n_ctx));
  const int n_chunks = (int)(opts.max_chunks > 0 ? std::min<int64_t>(opts.max_chunks, available) : available);
  const int n_vocab = model.config().n_vocab;
  const int first = opts.n_ctx / 2;

  PerplexityResult r;
  r.n_chunks = n_chunks;
  r.n_tokens_used = (int64_t)n_chunks * opts.n_ctx;
  const auto t0 = std::chrono::steady_clock::now();
  ProgressBar bar("ppl", n_chunks, opts.progress);
  Forward fwd(model);
  std::vector<float> logits;
  double sum = 0.0, sum2 = 0.0;
  for (int c = 0; c < n_chunks; ++c) {
    const size_t start = (size_t)c * opts.n_ctx;
    std::vector<BatchToken> batch(opts.n_ctx);
    for (int i = 0; i < opts.n_ctx; ++i) batch[i] = {tokens[start + i], i, 0, i >= first && i < opts.n_ctx - 1};
    if (opts.add_bos && opts.bos >= 0) batch[0].token = opts.bos;
    auto cache = make_cache();
    // A calibrated plan's key smoothing (q *= lambda, k /= lambda before RoPE; kv_plan.h).
    if (c == 0)
      if (const auto* paged = dynamic_cast<const PagedKvCache*>(cache.get())) fwd.set_qk_smoothing(paged->plan().smoothing);
    fwd.run(*cache, batch, logits);
    for (int i = first; i < opts.n_ctx - 1; ++i) {
      const double nll = token_nll(logits.data() + (size_t)(i - first) * n_vocab, n_vocab, tokens[start + i + 1]);
      r.nll.push_back(nll);
      sum += nll;
      sum2 += nll * nll;
    }
    const double mean = sum / r.nll.size();
    char extra[64];
    std::snprintf(extra, sizeof extra, "ppl %.4f", std::exp(mean));
    bar.update(c + 1, extra);
  }
  r.n_scored = (int64_t)r.nll.size();
  r.mean_nll = sum / r.n_scored;
  r.ppl = std::exp(r.mean_nll);
  double var = sum2 / r.n_scored - r.mean_nll * r.mean_nll;
  r.ppl_stderr = (var > 0 && r.n_scored > 1) ? r.ppl * std::sqrt(var / (r.n_scored - 1)) : 0.0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char extra[64];
  std::snprintf(extra, sizeof extra, "ppl %.4f", r.ppl);
  bar.finish(extra);
  return r;
}

}  // namespace mpkv

#include "eval/perplexity.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "engine/model_runner.h"
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

namespace {

// The Error text when `cache` cannot reserve one more token after `held` of a window.
std::string window_over_budget_message(const PagedKvCache& cache, int n_ctx, int held) {
  std::string msg = "perplexity: the KV budget cannot hold one window of " + std::to_string(n_ctx) +
                    " tokens (no room for token " + std::to_string(held + 1) + ")";
  char buf[160];
  std::snprintf(buf, sizeof buf, "; the budget is %.2f MiB, a window of %d tokens surely fits in %.2f MiB",
                cache.pool().budget() / 1048576.0, n_ctx, cache.byte_model().sequence_bytes_bound(n_ctx) / 1048576.0);
  msg += buf;
  return msg + ": raise --kv-budget-mib or lower -c";
}

}  // namespace

PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& tokens, const PerplexityOptions& opts,
                            const KvCacheFactory& make_cache) {
  MPKV_CHECK(opts.n_ctx >= 8, "perplexity: context must be at least 8 tokens");
  MPKV_CHECK(opts.batch >= 1, "perplexity: the prefill batch must be at least 1 token");
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
  std::vector<int32_t> window;
  double sum = 0.0, sum2 = 0.0;
  for (int c = 0; c < n_chunks; ++c) {
    const size_t start = (size_t)c * opts.n_ctx;
    window.assign(tokens.begin() + start, tokens.begin() + start + opts.n_ctx);
    if (opts.add_bos && opts.bos >= 0) window[0] = opts.bos;
    auto cache = make_cache();
    ModelRunner runner(model, *cache);
    // Logits at positions [first, n_ctx - 1) predict the token after each; turned into NLLs chunk
    // by chunk so a window's logits are never all held at once.
    const size_t held = runner.prefill(0, window, 0, opts.batch, {(size_t)first, (size_t)opts.n_ctx - 1},
                                       [&](size_t i0, size_t n, const float* logits) {
                                         for (size_t j = 0; j < n; ++j) {
                                           const double nll = token_nll(logits + j * n_vocab, n_vocab,
                                                                        tokens[start + i0 + j + 1]);
                                           r.nll.push_back(nll);
                                           sum += nll;
                                           sum2 += nll * nll;
                                         }
                                       });
    if (held < window.size()) throw Error(window_over_budget_message(*cache, opts.n_ctx, (int)held));
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

#include "engine/generator.h"

#include <chrono>

#include "kvcache/paged_kv_cache.h"
#include "util/error.h"

namespace mpkv {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

std::vector<SequenceResult> generate(const Model& model, const Tokenizer& tok, KvCache& cache,
                                     const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opts,
                                     GenerateStats& stats, const TokenCallback& on_token,
                                     const FinishCallback& on_finish) {
  const int n_vocab = model.config().n_vocab;
  MPKV_CHECK(opts.prefill_chunk > 0, "prefill chunk must be positive");
  for (size_t s = 0; s < prompts.size(); ++s) {
    MPKV_CHECK(!prompts[s].empty(), "prompt " + std::to_string(s) + " is empty");
    MPKV_CHECK((int)prompts[s].size() < opts.n_ctx,
               "prompt " + std::to_string(s) + " has " + std::to_string(prompts[s].size()) +
                   " tokens, which does not fit the context of " + std::to_string(opts.n_ctx) + " (-c)");
  }
  Forward fwd(model);
  // A calibrated plan's key smoothing (q *= lambda, k /= lambda before RoPE; kv_plan.h).
  if (const auto* paged = dynamic_cast<const PagedKvCache*>(&cache)) fwd.set_qk_smoothing(paged->plan().smoothing);
  std::vector<Sampler> samplers;
  for (size_t s = 0; s < prompts.size(); ++s) {
    SamplerOptions so = opts.sampling;
    so.seed += s;
    samplers.emplace_back(so);
  }
  std::vector<SequenceResult> res(prompts.size());
  std::vector<int32_t> next(prompts.size());
  std::vector<int> pos(prompts.size());
  std::vector<float> logits;

  std::vector<bool> active(prompts.size(), true);
  auto finish = [&](size_t s, const char* reason) {
    res[s].stop_reason = reason;
    active[s] = false;
    if (on_finish) on_finish((int)s, res[s]);
    if (!opts.keep_finished) cache.remove((int)s);
  };

  // Prefill each prompt in chunks; the last chunk yields the first sampled token. A chunk the
  // cache cannot reserve is retried in halves (smaller chunks need fewer fresh pages at once).
  auto t0 = std::chrono::steady_clock::now();
  for (size_t s = 0; s < prompts.size(); ++s) {
    const auto& p = prompts[s];
    for (size_t start = 0; start < p.size();) {
      size_t n = std::min(p.size() - start, (size_t)opts.prefill_chunk);
      while (n > 1 && !cache.reserve((int)s, (int)n)) n /= 2;
      if (n == 1 && !cache.reserve((int)s, 1)) break;
      const size_t end = start + n;
      std::vector<BatchToken> batch;
      for (size_t i = start; i < end; ++i) batch.push_back({p[i], (int)i, (int)s, i + 1 == p.size()});
      fwd.run(cache, batch, logits);
      start = end;
    }
    stats.n_prompt_tokens += cache.length((int)s, 0);
    if (cache.length((int)s, 0) < (int)p.size()) {
      finish(s, "kv_budget");
      stats.n_kv_budget_stops++;
      continue;
    }
    next[s] = samplers[s].sample(logits.data(), n_vocab);
    pos[s] = (int)p.size();
  }
  stats.prefill_seconds += seconds_since(t0);

  // Decode: one batch per step with one token of every active sequence.
  t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<BatchToken> batch;
    std::vector<int> batch_seq;
    for (size_t s = 0; s < prompts.size(); ++s) {
      if (!active[s]) continue;
      const int32_t t = next[s];
      res[s].tokens.push_back(t);
      stats.n_generated++;
      if (on_token) on_token((int)s, t);
      if (opts.stop_at_eog && tok.is_end_of_generation(t)) {
        finish(s, "eog");
      } else if (opts.n_predict >= 0 && (int)res[s].tokens.size() >= opts.n_predict) {
        finish(s, "n_predict");
      } else if (pos[s] + 1 >= opts.n_ctx) {
        finish(s, "n_ctx");
      } else if (!cache.reserve((int)s, 1)) {
        finish(s, "kv_budget");
        stats.n_kv_budget_stops++;
      } else {
        batch.push_back({t, pos[s]++, (int)s, true});
        batch_seq.push_back((int)s);
      }
    }
    if (batch.empty()) break;
    fwd.run(cache, batch, logits);
    stats.n_decoded += (int)batch.size();
    for (size_t b = 0; b < batch_seq.size(); ++b) {
      next[batch_seq[b]] = samplers[batch_seq[b]].sample(logits.data() + b * (size_t)n_vocab, n_vocab);
    }
  }
  stats.decode_seconds += seconds_since(t0);
  return res;
}

}  // namespace mpkv

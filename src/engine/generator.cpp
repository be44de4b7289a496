#include "engine/generator.h"

#include <chrono>

#include "util/error.h"

namespace mpkv {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

std::vector<SequenceResult> generate(const Model& model, const Tokenizer& tok, KvCache& cache,
                                     const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& opts,
                                     GenerateStats& stats, const TokenCallback& on_token) {
  const int n_vocab = model.config().n_vocab;
  MPKV_CHECK(opts.prefill_chunk > 0, "prefill chunk must be positive");
  for (size_t s = 0; s < prompts.size(); ++s) {
    MPKV_CHECK(!prompts[s].empty(), "prompt " + std::to_string(s) + " is empty");
    MPKV_CHECK((int)prompts[s].size() < opts.n_ctx,
               "prompt " + std::to_string(s) + " has " + std::to_string(prompts[s].size()) +
                   " tokens, which does not fit the context of " + std::to_string(opts.n_ctx) + " (-c)");
  }
  Forward fwd(model);
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

  // Prefill each prompt in chunks; the last chunk yields the first sampled token.
  auto t0 = std::chrono::steady_clock::now();
  for (size_t s = 0; s < prompts.size(); ++s) {
    const auto& p = prompts[s];
    for (size_t start = 0; start < p.size(); start += opts.prefill_chunk) {
      const size_t end = std::min(p.size(), start + opts.prefill_chunk);
      std::vector<BatchToken> batch;
      for (size_t i = start; i < end; ++i) batch.push_back({p[i], (int)i, (int)s, i + 1 == p.size()});
      fwd.run(cache, batch, logits);
    }
    next[s] = samplers[s].sample(logits.data(), n_vocab);
    pos[s] = (int)p.size();
    stats.n_prompt_tokens += (int)p.size();
  }
  stats.prefill_seconds += seconds_since(t0);

  // Decode: one batch per step with one token of every active sequence.
  t0 = std::chrono::steady_clock::now();
  std::vector<bool> active(prompts.size(), true);
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
        res[s].stop_reason = "eog";
      } else if (opts.n_predict >= 0 && (int)res[s].tokens.size() >= opts.n_predict) {
        res[s].stop_reason = "n_predict";
      } else if (pos[s] + 1 >= opts.n_ctx) {
        res[s].stop_reason = "n_ctx";
      } else {
        batch.push_back({t, pos[s]++, (int)s, true});
        batch_seq.push_back((int)s);
        continue;
      }
      active[s] = false;
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

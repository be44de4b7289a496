#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace mpkv {

int32_t argmax(const float* x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

Sampler::Sampler(SamplerOptions opts) : opts_(opts), rng_(opts.seed) {
  MPKV_CHECK(opts.temperature >= 0.0f, "temperature must be >= 0");
  MPKV_CHECK(opts.top_p > 0.0f && opts.top_p <= 1.0f, "top-p must be in (0, 1]");
  MPKV_CHECK(opts.top_k >= 0, "top-k must be >= 0");
  MPKV_CHECK(opts.min_p >= 0.0f && opts.min_p <= 1.0f, "min-p must be in [0, 1]");
  MPKV_CHECK(opts.repeat_penalty > 0.0f && std::isfinite(opts.repeat_penalty), "repeat-penalty must be > 0");
  MPKV_CHECK(opts.repeat_last_n >= 0, "repeat-last-n must be >= 0");
}

void Sampler::accept(int32_t token) {
  if (opts_.repeat_last_n == 0) return;
  history_.push_back(token);
  if ((int)history_.size() > opts_.repeat_last_n) history_.pop_front();
}

const float* Sampler::penalized(const float* logits, int n_vocab) {
  if (opts_.repeat_penalty == 1.0f || history_.empty()) return logits;
  penalized_.assign(logits, logits + n_vocab);
  std::vector<int32_t> seen(history_.begin(), history_.end());
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (int32_t t : seen) {
    if (t < 0 || t >= n_vocab) continue;
    float& l = penalized_[t];
    l = l > 0.0f ? l / opts_.repeat_penalty : l * opts_.repeat_penalty;
  }
  return penalized_.data();
}

int32_t Sampler::sample(const float* raw_logits, int n_vocab) {
  const int32_t t = sample_from(penalized(raw_logits, n_vocab), n_vocab);
  accept(t);
  return t;
}

int32_t Sampler::sample_from(const float* logits, int n_vocab) {
  if (opts_.temperature == 0.0f) return argmax(logits, n_vocab);
  cand_.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], i};
  const int k = opts_.top_k > 0 ? std::min(opts_.top_k, n_vocab) : n_vocab;
  std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), [](auto& a, auto& b) { return a.first > b.first; });
  cand_.resize(k);
  const float mx = cand_[0].first;
  double sum = 0.0;
  for (auto& c : cand_) {
    c.first = std::exp((c.first - mx) / opts_.temperature);
    sum += c.first;
  }
  // Nucleus: cut after the cumulative probability reaches top_p.
  double cum = 0.0;
  size_t keep = cand_.size();
  for (size_t i = 0; i < cand_.size(); ++i) {
    cum += cand_[i].first / sum;
    if (cum >= opts_.top_p) {
      keep = i + 1;
      break;
    }
  }
  // Min-p: cand_[0] is the most likely (weight exp(0) = 1), so p_i >= min_p * p_max <=> weight_i >= min_p.
  if (opts_.min_p > 0.0f) {
    size_t k_min = 1;
    while (k_min < keep && cand_[k_min].first >= opts_.min_p) ++k_min;
    keep = k_min;
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += cand_[i].first;
  std::uniform_real_distribution<double> u(0.0, kept);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= cand_[i].first;
    if (r <= 0.0) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace mpkv

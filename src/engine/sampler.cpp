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
}

int32_t Sampler::sample(const float* logits, int n_vocab) {
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

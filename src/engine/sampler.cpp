#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
  for (float p : {opts.presence_penalty, opts.frequency_penalty})
    MPKV_CHECK(p >= -kMaxOpenAiPenalty && p <= kMaxOpenAiPenalty, "presence/frequency penalty must be in [-2, 2]");
  for (const auto& [token, bias] : opts.logit_bias) {
    MPKV_CHECK(token >= 0, "logit-bias token ids must be >= 0");
    MPKV_CHECK(bias >= -kMaxLogitBias && bias <= kMaxLogitBias, "logit-bias values must be in [-100, 100]");
  }
}

void Sampler::accept(int32_t token) {
  if (opts_.repeat_last_n == 0) return;
  history_.push_back(token);
  if ((int)history_.size() > opts_.repeat_last_n) history_.pop_front();
}

bool Sampler::adjusts_logits() const {
  const bool repetition = opts_.repeat_penalty != 1.0f && !history_.empty();
  const bool openai = (opts_.presence_penalty != 0.0f || opts_.frequency_penalty != 0.0f) && !generated_.empty();
  return repetition || openai || !opts_.logit_bias.empty();
}

const float* Sampler::penalized(const float* logits, int n_vocab) {
  if (!adjusts_logits()) return logits;
  penalized_.assign(logits, logits + n_vocab);
  // (a) Each distinct token once, without sorting the history: a token is penalized only while
  // its value is still the caller's. A repeat finds it changed, or the penalty maps that value to
  // itself (0, say), where a second application changes nothing either.
  if (opts_.repeat_penalty != 1.0f) {
    for (int32_t t : history_) {
      if (t < 0 || t >= n_vocab) continue;
      float& l = penalized_[t];
      if (std::memcmp(&l, &logits[t], sizeof(float)) != 0) continue;
      l = l > 0.0f ? l / opts_.repeat_penalty : l * opts_.repeat_penalty;
    }
  }
  // (b), (c): additive, one term per token, so the map's iteration order does not matter.
  if (opts_.presence_penalty != 0.0f || opts_.frequency_penalty != 0.0f)
    for (const auto& [t, count] : generated_)
      if (t >= 0 && t < n_vocab) penalized_[t] -= opts_.presence_penalty + (float)count * opts_.frequency_penalty;
  for (const auto& [t, bias] : opts_.logit_bias)
    if (t < n_vocab) penalized_[t] += bias;
  return penalized_.data();
}

int32_t Sampler::sample(const float* raw_logits, int n_vocab) {
  const int32_t t = sample_from(penalized(raw_logits, n_vocab), n_vocab);
  accept(t);
  if (opts_.presence_penalty != 0.0f || opts_.frequency_penalty != 0.0f) ++generated_[t];
  return t;
}

int32_t Sampler::sample_from(const float* logits, int n_vocab) {
  if (opts_.temperature == 0.0f) return argmax(logits, n_vocab);
  const int k = opts_.top_k > 0 ? std::min(opts_.top_k, n_vocab) : n_vocab;
  if (k < n_vocab) return sample_top_k(logits, n_vocab, k);
  return sample_all(logits, n_vocab);
}

// "Before" order: logit descending, ties by token id ascending (a strict total order, so the
// candidate set and its order never depend on the sort algorithm).
namespace {
struct ByLogit {
  const float* l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};
}  // namespace

int32_t Sampler::sample_top_k(const float* logits, int n_vocab, int k) {
  // partial_sort of (logit, id) pairs: one comparison with the heap top per token for small k.
  cand_.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], i};
  std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  order_.resize(k);
  weight_.resize(n_vocab);
  const float mx = cand_[0].first;
  double sum = 0.0;
  for (int i = 0; i < k; ++i) {
    const int32_t t = cand_[i].second;
    order_[i] = t;
    weight_[t] = std::exp((cand_[i].first - mx) / opts_.temperature);
    sum += weight_[t];
  }
  sorted_ = k;
  next_bucket_ = kBuckets;
  return cut_and_draw(logits, k, sum, true);
}

// Weight band of w in (0, 1]: 0 for w = 1, b for w in [2^-b, 2^-(b-1)), the last band for anything
// below 2^-(kBuckets - 2) (zero and subnormals included). Bands are ordered like the weights.
static int band(float w) {
  uint32_t bits;
  std::memcpy(&bits, &w, sizeof bits);
  const int e = (int)((bits >> 23) & 0xff);
  return std::clamp(127 - e, 0, Sampler::kBuckets - 1);  // < 0 only for NaN
}

int32_t Sampler::sample_all(const float* logits, int n_vocab) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  weight_.resize(n_vocab);
  band_.resize(n_vocab);
  int count[kBuckets] = {};
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) {
    const float w = std::exp((logits[i] - mx) / opts_.temperature);
    weight_[i] = w;
    sum += w;  // token id order (docs/design.md, "Sampling")
    const int b = band(w);
    band_[i] = (uint8_t)b;
    count[b]++;
  }
  // Counting sort by band: order_ holds band 0's tokens, then band 1's, ...; a band is sorted by
  // logit only when the walk below reaches it (ensure_sorted).
  int at = 0;
  for (int b = 0; b < kBuckets; ++b) {
    band_begin_[b] = at;
    at += count[b];
  }
  band_begin_[kBuckets] = at;
  int fill[kBuckets];
  std::memcpy(fill, band_begin_, sizeof fill);
  order_.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) order_[fill[band_[i]]++] = i;
  sorted_ = 0;
  next_bucket_ = 0;
  return cut_and_draw(logits, n_vocab, sum, false);
}

void Sampler::ensure_sorted(const float* logits, size_t i) {
  while (i >= sorted_) {
    MPKV_ASSERT(next_bucket_ < kBuckets, "sampler: walked past the last band");
    const int b = next_bucket_++;
    std::sort(order_.begin() + band_begin_[b], order_.begin() + band_begin_[b + 1], ByLogit{logits});
    sorted_ = band_begin_[b + 1];
  }
}

int32_t Sampler::cut_and_draw(const float* logits, size_t n, double sum, bool full_nucleus) {
  auto w = [&](size_t i) {
    ensure_sorted(logits, i);
    return weight_[order_[i]];
  };
  // Nucleus: cut after the cumulative probability reaches top_p (without top-k, top_p = 1: no cut).
  size_t keep = n;
  if (full_nucleus || opts_.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += w(i) / sum;
      if (cum >= opts_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // Min-p: the most likely token has weight exp(0) = 1, so p_i >= min_p * p_max <=> weight_i >= min_p.
  if (opts_.min_p > 0.0f) {
    size_t k_min = 1;
    while (k_min < keep && w(k_min) >= opts_.min_p) ++k_min;
    keep = k_min;
  }
  double kept = sum;  // nothing cut: the whole candidate set
  if (keep < n) {
    kept = 0.0;
    for (size_t i = 0; i < keep; ++i) kept += w(i);
  }
  std::uniform_real_distribution<double> u(0.0, kept);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= w(i);
    if (r <= 0.0) return order_[i];
  }
  ensure_sorted(logits, keep - 1);
  return order_[keep - 1];
}

}  // namespace mpkv

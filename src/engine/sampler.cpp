#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace mpkv {

int32_t argmax(const float* x, int n) { return sampler_kernels().argmax(x, n); }

bool check_first_exact(const SamplerOptions& o) {
  if (o.temperature == 0.0f) return true;
  return o.top_k == 0 && o.top_p >= 1.0f && o.min_p == 0.0f;
}

Sampler::Sampler(SamplerOptions opts) : Sampler(opts, sampler_kernels()) {}

Sampler::Sampler(SamplerOptions opts, const SamplerKernels& kernels) : opts_(opts), kernels_(kernels), rng_(opts.seed) {
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

const float* Sampler::penalized(const float* logits, int n_vocab, const uint32_t* allowed) {
  if (!allowed && !adjusts_logits()) return logits;
  penalized_.assign(logits, logits + n_vocab);
  if (allowed)  // step 0: -inf stays -inf through every adjustment below
    for (int t = 0; t < n_vocab; ++t)
      if (!((allowed[t >> 5] >> (t & 31)) & 1u)) penalized_[t] = -INFINITY;
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

int32_t Sampler::sample(const float* raw_logits, int n_vocab, const uint32_t* allowed) {
  // With a mask a top-k walk needs at most the allowed tokens (they alone have logits above -inf);
  // masked tokens weigh 0, so no cut or draw returns one (cut_and_draw).
  int n_allowed = n_vocab;
  if (allowed) {
    n_allowed = 0;
    for (int w = 0; w < (n_vocab + 31) / 32; ++w) {
      const uint32_t bits = w == n_vocab / 32 ? allowed[w] & ((1u << (n_vocab % 32)) - 1u) : allowed[w];
      n_allowed += std::popcount(bits);
    }
    MPKV_ASSERT(n_allowed > 0, "sampler: the grammar's mask allows no token");
  }
  const int32_t t = sample_from(penalized(raw_logits, n_vocab, allowed), n_vocab, n_allowed);
  commit(t);
  return t;
}

int32_t Sampler::propose(const float* raw_logits, int n_vocab) {
  if (!check_first_exact(opts_)) return -1;
  const float* logits = penalized(raw_logits, n_vocab, nullptr);
  if (opts_.temperature != 0.0f && !std::isfinite(kernels_.max_value(logits, n_vocab))) return -1;
  return sample_from(logits, n_vocab, n_vocab);
}

void Sampler::commit(int32_t t) {
  accept(t);
  if (opts_.presence_penalty != 0.0f || opts_.frequency_penalty != 0.0f) ++generated_[t];
}

int32_t Sampler::sample_from(const float* logits, int n_vocab, int n_candidates) {
  if (opts_.temperature == 0.0f) return kernels_.argmax(logits, n_vocab);
  const float mx = kernels_.max_value(logits, n_vocab);
  if (!std::isfinite(mx)) return kernels_.argmax(logits, n_vocab);  // no finite logit to weigh the others by
  // No top-k stays the whole-vocabulary path (a top-k walk over thousands of allowed tokens would
  // sort them all).
  const int k = opts_.top_k > 0 ? std::min({opts_.top_k, n_vocab, n_candidates}) : n_vocab;
  start_walk(n_vocab, mx, (size_t)k);
  if (k < n_vocab) return sample_top_k(logits, k);
  return sample_all(logits, n_vocab);
}

void Sampler::start_walk(int n_vocab, float mx, size_t limit) {
  order_.resize(n_vocab);
  weight_.resize(n_vocab);
  n_vocab_ = n_vocab;
  max_logit_ = mx;
  limit_ = limit;
  sorted_ = 0;
  next_level_ = 0;
}

// "Before" order: logit descending, ties by token id ascending (a strict total order, so the
// candidate set and its order never depend on the sort algorithm).
namespace {
struct ByLogit {
  const float* l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};
}  // namespace

int32_t Sampler::sample_top_k(const float* logits, int k) {
  ensure_sorted(logits, (size_t)k - 1);
  const float mx = logits[order_[0]];
  double sum = 0.0;
  for (int i = 0; i < k; ++i) {  // sorted order, as before the levels
    const int32_t t = order_[i];
    const float x = (logits[t] - mx) / opts_.temperature;
    weight_[t] = std::isnan(x) ? 0.0f : std::exp(x);  // NaN logits weigh 0 (sampler_kernels.h)
    sum += weight_[t];
  }
  return cut_and_draw(logits, k, sum, true);
}

int32_t Sampler::sample_all(const float* logits, int n_vocab) {
  const double sum = kernels_.exp_weights(logits, n_vocab, max_logit_, opts_.temperature, weight_.data());
  return cut_and_draw(logits, n_vocab, sum, false);
}

void Sampler::ensure_sorted(const float* logits, size_t i) {
  MPKV_ASSERT(i < limit_, "sampler: walked past the candidates");
  while (i >= sorted_) add_level(logits);
}

// Level j's logits are [lo, hi) with lo = max - (j + 1) kLevelBits ln 2 T (the weights 2^-(j+1)kLevelBits
// and up) and hi the previous level's lo; thresholds are floats computed one way for every level,
// so they never increase and the levels, each sorted, concatenate into the sorted order.
void Sampler::add_level(const float* logits) {
  MPKV_ASSERT(next_level_ < kLevels, "sampler: walked past the last level");
  const int j = next_level_++;
  auto threshold = [&](int level) {
    return max_logit_ - (float)((level + 1) * kLevelBits * 0.6931471805599453 * opts_.temperature);
  };
  const bool last = j == kLevels - 1;
  const float hi = j == 0 ? INFINITY : threshold(j - 1);
  const float lo = last ? -INFINITY : threshold(j);
  int32_t* begin = order_.data() + sorted_;
  size_t n = (size_t)kernels_.select_range(logits, n_vocab_, lo, hi, begin);
  // Sort only what the walk can reach: the top-k path stops at k.
  const size_t need = std::min(n, limit_ - sorted_);
  std::partial_sort(begin, begin + need, begin + n, ByLogit{logits});
  if (last)  // NaN logits (never selected by a range) after everything
    for (int t = 0; t < n_vocab_; ++t)
      if (std::isnan(logits[t])) begin[n++] = t;
  sorted_ += last ? n : need;
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
  // Rounding left weight over: the last candidate with any weight (a masked or underflowed token
  // weighs 0 and is never the answer). The loop above sorted every candidate it walked.
  size_t last = keep - 1;
  while (last > 0 && w(last) <= 0.0f) --last;
  return order_[last];
}

}  // namespace mpkv

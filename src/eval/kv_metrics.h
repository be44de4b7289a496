// Per-token comparisons of a method's next-token distribution with the 16-bit reference's, and
// their aggregation (docs/algorithms.md §9): NLL of the true next token, KL(reference || method), top-1
// agreement. All in double from float logits [n_vocab].
#pragma once
#include <cstdint>
#include <vector>

namespace mpkv {

// log-softmax of logits [n] into out [n] (double), max-subtracted.
void log_softmax(const float* logits, int n, double* out);

// One token's comparison. `ref_logp` is the reference's log-softmax (log_softmax above), computed
// once per position and shared by every method at that position.
struct TokenComparison {
  double nll = 0;   // -log p_method(target); target < 0: not scored (0)
  double kl = 0;    // sum_i p_ref(i) (log p_ref(i) - log p_method(i)) >= 0
  bool top1 = false;  // argmax of method == argmax of reference (first index on ties)
};
TokenComparison compare_token(const double* ref_logp, const float* logits, int n_vocab, int32_t target,
                              std::vector<double>& scratch);

// Index of the largest value (first on ties); the float one is the sampler's (engine/sampler.h).
int argmax(const double* x, int n);

// Running sums over scored tokens of one method. Every token's NLL and KL are kept, with the stream
// (text window) it came from, for percentiles and block bootstrap intervals (block_bootstrap.h).
struct MetricAccumulator {
  double nll_sum = 0;
  int64_t n = 0, top1 = 0;
  std::vector<float> kl;
  std::vector<double> nll;
  std::vector<int32_t> stream;

  void add(const TokenComparison& c, int32_t stream_id = 0);
  double ppl() const;          // exp(mean NLL)
  double kl_mean() const;
  double kl_percentile(double p) const;  // nearest-rank percentile, p in (0, 100]
  double top1_rate() const;
};

}  // namespace mpkv

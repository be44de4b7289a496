#include "eval/kv_metrics.h"

#include <algorithm>
#include <cmath>

#include "engine/sampler.h"
#include "util/error.h"

namespace mpkv {

void log_softmax(const float* logits, int n, double* out) {
  double mx = logits[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, (double)logits[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp((double)logits[i] - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = (double)logits[i] - lse;
}

int argmax(const double* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

TokenComparison compare_token(const double* ref_logp, const float* logits, int n_vocab, int32_t target,
                              std::vector<double>& scratch) {
  scratch.resize(n_vocab);
  log_softmax(logits, n_vocab, scratch.data());
  TokenComparison c;
  double kl = 0;
  for (int i = 0; i < n_vocab; ++i) kl += std::exp(ref_logp[i]) * (ref_logp[i] - scratch[i]);
  c.kl = std::max(kl, 0.0);  // rounding can give -1e-17 for identical distributions
  c.nll = target >= 0 ? -scratch[target] : 0.0;
  c.top1 = argmax(logits, n_vocab) == argmax(ref_logp, n_vocab);
  return c;
}

void MetricAccumulator::add(const TokenComparison& c, int32_t stream_id) {
  nll_sum += c.nll;
  ++n;
  top1 += c.top1 ? 1 : 0;
  kl.push_back((float)c.kl);
  nll.push_back(c.nll);
  stream.push_back(stream_id);
}

double MetricAccumulator::ppl() const { return n ? std::exp(nll_sum / n) : 0.0; }

double MetricAccumulator::kl_mean() const {
  double s = 0;
  for (float x : kl) s += x;
  return kl.empty() ? 0.0 : s / kl.size();
}

double MetricAccumulator::kl_percentile(double p) const {
  MPKV_CHECK(p > 0 && p <= 100, "percentile must be in (0, 100]");
  if (kl.empty()) return 0.0;
  std::vector<float> s = kl;
  const size_t rank = (size_t)std::ceil(p / 100.0 * s.size());  // nearest rank, 1-based
  std::nth_element(s.begin(), s.begin() + (rank - 1), s.end());
  return s[rank - 1];
}

double MetricAccumulator::top1_rate() const { return n ? (double)top1 / n : 0.0; }

}  // namespace mpkv

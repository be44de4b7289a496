// Wilson intervals and the exact McNemar test (accuracy_stats.h has the formulas).
#include "eval/accuracy_stats.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace mpkv {

namespace {
constexpr double kZ95 = 1.959963984540054;
}

WilsonInterval wilson_interval(int k, int n) {
  MPKV_ASSERT(n >= 0 && k >= 0 && k <= n, "wilson_interval: need 0 <= k <= n");  // a caller's bug
  if (n == 0) return {0.0, 1.0};
  const double z2 = kZ95 * kZ95, nn = n, kk = k;
  const double centre = (kk + z2 / 2) / (nn + z2);
  const double half = kZ95 / (nn + z2) * std::sqrt(kk * (nn - kk) / nn + z2 / 4);
  // At k = 0 (k = n) the bound is 0 (1) exactly; centre - half would round to a few ulps off it.
  return {k == 0 ? 0.0 : std::max(0.0, centre - half), k == n ? 1.0 : std::min(1.0, centre + half)};
}

PairedCounts paired_counts(const std::vector<bool>& reference, const std::vector<bool>& method) {
  MPKV_ASSERT(reference.size() == method.size(), "paired_counts: the two runs scored different item counts");
  PairedCounts p;
  p.n = (int)reference.size();
  for (size_t i = 0; i < reference.size(); ++i) {
    if (reference[i] && method[i]) ++p.both_right;
    else if (reference[i]) ++p.ref_only;
    else if (method[i]) ++p.method_only;
    else ++p.both_wrong;
  }
  return p;
}

double mcnemar_exact_p(int b, int c) {
  MPKV_ASSERT(b >= 0 && c >= 0, "mcnemar_exact_p: counts must be >= 0");
  const int n = b + c, k = std::min(b, c);
  if (n == 0) return 1.0;
  // P[X <= k] for X ~ Binomial(n, 1/2), terms in log space (n may be in the thousands).
  double tail = 0.0;
  for (int i = 0; i <= k; ++i)
    tail += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, 2.0 * tail);
}

}  // namespace mpkv

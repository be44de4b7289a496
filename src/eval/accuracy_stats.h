// Statistics of exact-match accuracy for `mpkv eval --task` (docs/accuracy_tasks.md "Statistics").
//
// Wilson score interval of k successes in n trials at z = 1.959964 (95%):
//   centre = (k + z^2/2) / (n + z^2), half = z / (n + z^2) * sqrt(k (n - k) / n + z^2 / 4).
// Paired comparison of a method with the reference on the same items (McNemar): only discordant
// items count, b = right with the reference and wrong with the method, c = the other way round;
// the exact two-sided p-value is min(1, 2 * P[X <= min(b, c)]) for X ~ Binomial(b + c, 1/2).
#pragma once
#include <cstdint>
#include <vector>

namespace mpkv {

struct WilsonInterval {
  double lo = 0, hi = 0;  // fractions in [0, 1]
};
// n = 0 gives [0, 1]. Error when k > n or k < 0.
WilsonInterval wilson_interval(int k, int n);

struct PairedCounts {
  int n = 0;             // items scored by both
  int both_right = 0, ref_only = 0, method_only = 0, both_wrong = 0;
  // (method right - reference right) / n
  double difference() const { return n ? double(method_only - ref_only) / n : 0.0; }
};
// Error when the two vectors differ in length.
PairedCounts paired_counts(const std::vector<bool>& reference, const std::vector<bool>& method);
// Exact two-sided McNemar p-value of b and c (1 when b + c = 0).
double mcnemar_exact_p(int b, int c);

}  // namespace mpkv

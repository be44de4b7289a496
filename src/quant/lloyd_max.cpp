#include "quant/lloyd_max.h"

#include <cmath>
#include <string>

#include "quant/quant_options.h"
#include "util/error.h"

namespace mpkv {

namespace {
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
double pdf(double x) { return std::isinf(x) ? 0.0 : kInvSqrt2Pi * std::exp(-0.5 * x * x); }
double cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
// x * pdf(x), 0 at +-inf.
double xpdf(double x) { return std::isinf(x) ? 0.0 : x * pdf(x); }
}  // namespace

LloydMaxCodebook compute_lloyd_max_gaussian(int bits, double tol, int max_iterations) {
  MPKV_CHECK(bits >= 1 && bits <= 8, "Lloyd-Max codebook: bits " + std::to_string(bits) + " outside [1, 8]");
  const int n = 1 << bits;
  LloydMaxCodebook cb;
  cb.bits = bits;
  cb.centroids.resize(n);
  cb.thresholds.resize(n - 1);
  for (int i = 0; i < n; ++i) cb.centroids[i] = -3.0 + 6.0 * (i + 0.5) / n;
  auto edge = [&](int i) -> double {  // boundary i in [0, n]: -inf, thresholds..., +inf
    if (i == 0) return -(double)INFINITY;
    if (i == n) return (double)INFINITY;
    return cb.thresholds[i - 1];
  };
  for (int it = 0; it < max_iterations; ++it) {
    for (int i = 0; i + 1 < n; ++i) cb.thresholds[i] = 0.5 * (cb.centroids[i] + cb.centroids[i + 1]);
    double moved = 0;
    for (int i = 0; i < n; ++i) {
      const double a = edge(i), b = edge(i + 1);
      const double p = cdf(b) - cdf(a);
      const double c = (pdf(a) - pdf(b)) / p;  // E[X | a <= X < b]
      moved = std::max(moved, std::fabs(c - cb.centroids[i]));
      cb.centroids[i] = c;
    }
    cb.iterations = it + 1;
    if (moved < tol) break;
  }
  for (int i = 0; i + 1 < n; ++i) cb.thresholds[i] = 0.5 * (cb.centroids[i] + cb.centroids[i + 1]);
  // MSE = sum_i int_a^b (x - c)^2 phi: int x^2 phi = P + a phi(a) - b phi(b), int x phi = phi(a) - phi(b).
  double mse = 0;
  for (int i = 0; i < n; ++i) {
    const double a = edge(i), b = edge(i + 1), c = cb.centroids[i];
    const double p = cdf(b) - cdf(a);
    const double m1 = pdf(a) - pdf(b);
    const double m2 = p + xpdf(a) - xpdf(b);
    mse += m2 - 2 * c * m1 + c * c * p;
  }
  cb.mse = mse;
  cb.centroids_f.assign(cb.centroids.begin(), cb.centroids.end());
  cb.thresholds_f.assign(cb.thresholds.begin(), cb.thresholds.end());
  return cb;
}

const LloydMaxCodebook& lloyd_max_gaussian(int bits) {
  MPKV_CHECK(is_supported_codebook_bits(bits),
             "Lloyd-Max codebooks exist for bits 1..4, asked for " + std::to_string(bits));
  // Computed once at first use (a few ms for 4 bits); magic statics make it thread-safe.
  static const LloydMaxCodebook books[4] = {compute_lloyd_max_gaussian(1), compute_lloyd_max_gaussian(2),
                                            compute_lloyd_max_gaussian(3), compute_lloyd_max_gaussian(4)};
  return books[bits - 1];
}

}  // namespace mpkv

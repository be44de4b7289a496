// Lloyd-Max (MSE-optimal scalar) codebooks for the unit Gaussian N(0, 1), computed by Lloyd's
// algorithm with exact Gaussian integrals (no sampling). Turbo scales them by 1/sqrt(d) for the
// coordinates of a randomly rotated unit vector, which are close to N(0, 1/d).
// Known unit-Gaussian MSEs (Max 1960): 0.3634, 0.1175, 0.03455, 0.009497 at 1, 2, 3, 4 bits.
#pragma once
#include <vector>

namespace mpkv {

struct LloydMaxCodebook {
  int bits = 0;
  std::vector<double> centroids;   // 2^bits, ascending
  std::vector<double> thresholds;  // 2^bits - 1 midpoints; code = number of thresholds <= value
  std::vector<float> centroids_f, thresholds_f;  // the same in fp32 (what kernels use)
  double mse = 0;                  // E[(X - Q(X))^2] for X ~ N(0, 1), exact for these centroids
  int iterations = 0;
};

// Runs Lloyd's algorithm from evenly spaced centroids until no centroid moves more than `tol`.
LloydMaxCodebook compute_lloyd_max_gaussian(int bits, double tol = 1e-13, int max_iterations = 200000);

// The codebook for bits 1..4, computed once per process on first use (thread-safe); Error otherwise.
const LloydMaxCodebook& lloyd_max_gaussian(int bits);

}  // namespace mpkv

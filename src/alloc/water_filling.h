// RateQuant's continuous allocation by reverse water-filling (docs/algorithms.md §6, paper Theorem 2).
//
// Implemented: the Lagrangian form, which also covers a different beta per component (K and V fits,
// or several quantizers) and a cost c_i per bit (rate_model.h). Stationarity of
// sum_i w_i alpha_i beta_i^-b_i + mu (sum_i c_i b_i - C b_avg), C = sum_i c_i, gives
//
//   b_i(mu) = clip( log_beta_i( alpha_i w_i ln beta_i / (mu c_i) ), b_min, b_max )
//           = clip( a_i + t / ln beta_i ),   a_i = ln(alpha_i w_i ln beta_i / c_i) / ln beta_i,  t = -ln mu
//
// The clip is the KKT condition of the bounds (a clipped component's marginal gain is beyond the
// level). sum_i b_i(t) is continuous, non-decreasing and piecewise linear in t, with breakpoints where
// a component hits a bound; the level t with sum_i c_i b_i = C b_avg is found exactly by a search over
// the sorted breakpoints and one linear solve (the exact form of "bisection on mu"). With a shared
// alpha and beta and no bound active this is the paper's closed form
//   b_i* = b_avg + (ln w_i - mean_j ln w_j) / ln beta,
// and with bounds it equals "clip, then re-solve the free ones until nothing new clips" -- without
// that loop's failure mode of clipping a component at one bound in a round whose level later moves.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "alloc/rate_model.h"

namespace mpkv {

struct ContinuousAllocation {
  std::vector<double> bits;  // [N] real-valued b_i in [lo, hi], sum_i c_i b_i = C * b_avg
  double level = 0;          // t = -ln mu
  int n_at_min = 0;          // components clipped at the lower bound
  int n_at_max = 0;          // ... at the upper bound
  double objective = 0;      // sum_i w_i D_i(b_i)
};

// Bounds [p.min_bits, p.max_bits]. Validates p.
ContinuousAllocation water_fill(const RateQuantProblem& p);
// Same, with explicit bounds lo <= b_avg <= hi (e.g. the ends of a gapped set {2, 4, 8}).
ContinuousAllocation water_fill(const RateQuantProblem& p, double lo, double hi);

void to_json(nlohmann::json& j, const ContinuousAllocation& a);
void from_json(const nlohmann::json& j, ContinuousAllocation& a);

}  // namespace mpkv

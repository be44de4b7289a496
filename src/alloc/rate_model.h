// RateQuant's problem (docs/algorithms.md §6): N components, each one (layer, KV head, K|V), with a
// sensitivity weight w_i and a distortion model D_i(b) = alpha_i * beta_i^-b (fitted per quantizer
// and K|V by fit_exponential, src/quant/distortion.h; docs/calibration.md, "Distortion fits");
// choose bits b_i to minimise sum_i w_i D_i(b_i) under the bit budget
// sum_i c_i b_i <= (sum_i c_i) * b_avg. c_i, the component's cost per bit, is 1 when every component
// holds as many tokens; with sliding-window layers (gemma3) a windowed layer's components hold
// fewer pages than a global layer's, so a bit costs them fewer bytes: c_i is then their bytes per
// bit divided by the gcd over components (src/calib/plan_allocation.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace mpkv {

struct DistortionModel {
  double alpha = 1;  // D(0), > 0
  double beta = 4;   // distortion ratio per bit, > 1 (4 = 6.02 dB/bit)
};

// D(b) = alpha * beta^-b.
double distortion(const DistortionModel& m, double bits);

struct RateComponent {
  double weight = 1;      // w_i > 0: mean squared gradient norm (RateQuant eq. 4)
  DistortionModel model;  // the fit of this component's quantizer and role (K or V)
  int cost = 1;           // c_i >= 1: cost of one bit, in units of the cheapest component's
};

struct RateQuantProblem {
  std::vector<RateComponent> components;  // [N]; per-(layer, head, K|V) tables use kv_component_index order
  double avg_bits = 4;                    // b_avg
  int min_bits = 2;                       // b_min (continuous and greedy bounds)
  int max_bits = 8;                       // b_max
  // Min-max codes (uniform / kivi / rotated): b_min >= 2 is enforced, because a 1-bit min-max code
  // puts every value on {min, max} and its error exceeds the signal's variance (docs/algorithms.md §6);
  // D(b) = alpha beta^-b does not describe that point. False for Lloyd-Max (turbo) codes.
  bool min_max_quantizer = true;
};

// Throws Error naming the problem: no components, weight not finite and > 0, alpha <= 0, beta <= 1,
// cost < 1, min_bits < 1 (or < 2 for min-max), max_bits < min_bits or > 16, avg_bits outside
// [min_bits, max_bits].
void validate(const RateQuantProblem& p);

// sum_i c_i (N when every cost is 1).
int64_t total_cost(const RateQuantProblem& p);
bool unit_costs(const RateQuantProblem& p);
// The integer bit budget: floor(sum_i c_i * avg_bits) (a budget is a promise: never rounded up).
int64_t integer_bit_budget(const RateQuantProblem& p);
// sum_i c_i b_i.
int64_t cost_of(const RateQuantProblem& p, const std::vector<int>& bits);

// sum_i w_i D_i(bits[i]); bits has N entries.
double weighted_distortion(const RateQuantProblem& p, const std::vector<double>& bits);
double weighted_distortion(const RateQuantProblem& p, const std::vector<int>& bits);

}  // namespace mpkv

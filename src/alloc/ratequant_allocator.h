// RateQuant end to end (docs/algorithms.md §6): continuous reverse water-filling, then integer bits
// (greedy for contiguous sets, exact knapsack for gapped ones), with the figures the paper prints:
// the predicted gain AM/GM of w and the achieved objective against uniform bits.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "alloc/integer_bits.h"
#include "alloc/rate_model.h"
#include "alloc/water_filling.h"

namespace mpkv {

struct RateQuantResult {
  std::vector<int> bits;              // [N] final integer bits
  std::vector<double> continuous_bits;  // [N] water-filling solution (same bounds)
  std::string integerization;         // "greedy" or "knapsack"
  std::vector<int> allowed_bits;      // the set the integer bits were drawn from (sorted)
  int64_t bit_budget = 0;             // floor(sum_i c_i * b_avg) (N * b_avg at unit costs)
  int64_t bit_sum = 0;                // sum_i c_i b_i
  // Paper Theorem 3: J_uniform / J_mixed = AM(w) / GM(w), exact for a shared alpha and beta, unit costs, continuous
  // bits and no active bound; computable before any allocation ("is mixed precision worth it?").
  double predicted_gain_am_gm = 1;
  double objective = 0;               // sum_i w_i D_i(b_i), integer bits
  double objective_continuous = 0;    // same at the continuous bits (a lower bound for `objective`)
  double objective_uniform = 0;       // sum_i w_i D_i(b_avg): every component at the average
  double achieved_gain = 1;           // objective_uniform / objective
};

// AM(w) / GM(w) over the components' weights (>= 1; 1 iff all equal). Error on an invalid problem.
double am_gm_ratio(const RateQuantProblem& p);

// allowed empty: every integer in [min_bits, max_bits], greedy. Otherwise the given set: greedy when it
// is contiguous integers, knapsack when gapped; the continuous solution is then bounded by its ends.
RateQuantResult ratequant_allocate(const RateQuantProblem& p, const std::vector<int>& allowed = {});

// One line for the CLI: "ratequant: N components, b_avg ..., predicted gain (AM/GM) x, achieved
// objective y vs uniform z (gain g), continuous bound c".
std::string describe(const RateQuantResult& r);

void to_json(nlohmann::json& j, const RateQuantResult& r);
void from_json(const nlohmann::json& j, RateQuantResult& r);

}  // namespace mpkv

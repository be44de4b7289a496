// Integer bit-widths for RateQuant's problem (docs/algorithms.md §6), under sum_i c_i b_i <=
// floor(sum_i c_i * b_avg) (c_i the components' costs per bit, rate_model.h; 1 unless some layers
// slide).
//
// greedy: every integer in [min_bits, max_bits] is allowed. Start all at min_bits and spend the budget
//   one bit at a time on the component with the largest marginal gain w_i (D_i(b) - D_i(b + 1)) (each
//   step costs one bit). D_i is convex and decreasing, so each component's gains shrink as it grows and
//   this is exactly optimal (separable concave resource allocation with unit steps).
// knapsack: any allowed set, e.g. the gapped {2, 4, 8} that halving shifts can reach. Greedy is not
//   optimal there (a 4 -> 8 step costs four bits), so a multiple-choice knapsack is solved exactly by
//   dynamic programming over the integer cost-weighted bit sum: O(N * budget * |set|). It is also the
//   exact method whenever the costs differ (greedy's one-bit steps assume equal costs).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "alloc/rate_model.h"

namespace mpkv {

struct IntegerAllocation {
  std::vector<int> bits;   // [N]
  int64_t bit_sum = 0;     // sum of c_i b_i (<= bit_budget)
  int64_t bit_budget = 0;  // floor(sum_i c_i * b_avg)
  double objective = 0;    // sum_i w_i D_i(b_i)
};

// Validates p (b_min, budget). Error when the budget cannot give every component min_bits, or when
// the costs are not all 1 (use the knapsack).
IntegerAllocation greedy_integer_bits(const RateQuantProblem& p);

// allowed: distinct bit-widths within [p.min_bits, p.max_bits] (any order). Error on a bad set, on a
// budget below N * min(allowed) (the message names that smallest feasible average), or on a table
// over ~2e8 cells.
IntegerAllocation knapsack_integer_bits(const RateQuantProblem& p, const std::vector<int>& allowed);

void to_json(nlohmann::json& j, const IntegerAllocation& a);
void from_json(const nlohmann::json& j, IntegerAllocation& a);

}  // namespace mpkv

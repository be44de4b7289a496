// The multiple-choice integer program of PM-KVQ (docs/algorithms.md §4), solved exactly with GLPK:
//
//   min  sum_i sum_j x_ij cost_ij
//   s.t. sum_j x_ij = 1            for every component i    (one choice each)
//        sum_i sum_j x_ij bytes_ij <= budget
//        x_ij in {0, 1}
//
// Components are layers or (layer, KV head); choices are bit-widths. Pure function over tables.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace mpkv {

struct MultipleChoiceProblem {
  std::vector<std::vector<double>> cost;    // [component][choice], finite
  std::vector<std::vector<int64_t>> bytes;  // [component][choice], >= 0, same shape as cost
  int64_t budget_bytes = 0;
};

struct MultipleChoiceSolution {
  std::vector<int> choice;          // [component] index of the chosen choice
  double objective = 0;             // sum of the chosen costs
  int64_t bytes = 0;                // sum of the chosen bytes (<= budget_bytes)
  int64_t budget_bytes = 0;
  int64_t min_feasible_bytes = 0;   // sum over components of the smallest bytes: the least budget that works
};

// Sum over components of their smallest bytes (the least budget with any solution). Validates.
int64_t min_feasible_bytes(const MultipleChoiceProblem& p);

// Solves with glp_intopt (presolve on, terminal output off). Throws Error on a malformed table
// (empty, ragged, non-finite cost, negative bytes) and, when budget_bytes < min_feasible_bytes,
// an Error naming that smallest feasible budget.
MultipleChoiceSolution solve_multiple_choice(const MultipleChoiceProblem& p);

void to_json(nlohmann::json& j, const MultipleChoiceSolution& s);
void from_json(const nlohmann::json& j, MultipleChoiceSolution& s);

}  // namespace mpkv

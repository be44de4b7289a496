// PM-KVQ's block-wise bit allocation (docs/calibration.md): per block (a layer, or a (layer, KV
// head)) one bit-width from a set B, minimising the summed first-order Taylor sensitivity s_{i,b}
// under a byte budget. The bytes of every choice come from the caller: calibration takes them from
// the KV cache's own accounting (src/calib/plan_allocation.h), so the budget the program meets is
// the one the cache charges.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>


namespace mpkv {

struct PmkvqProblem {
  std::vector<int> bits;                         // B, e.g. {2, 4} or {2, 4, 8}; distinct
  std::vector<std::vector<double>> sensitivity;  // [component][j]: s_{i, bits[j]}
  std::vector<std::vector<int64_t>> bytes;       // [component][j]: its bytes at bits[j]
  int64_t budget_bytes = 0;                      // M, for all components together
};

struct PmkvqAllocation {
  std::vector<int> bits;            // [component] final bit-width
  double objective = 0;             // sum of the chosen sensitivities
  int64_t bytes = 0;                // memory of the allocation (<= budget_bytes)
  int64_t budget_bytes = 0;
  int64_t min_feasible_bytes = 0;   // every component at min(B)
};

// Builds the multiple-choice program and solves it with GLPK. Error on malformed input or an infeasible budget (the message names the smallest feasible one).
PmkvqAllocation pmkvq_allocate(const PmkvqProblem& p);

void to_json(nlohmann::json& j, const PmkvqAllocation& a);
void from_json(const nlohmann::json& j, PmkvqAllocation& a);

}  // namespace mpkv

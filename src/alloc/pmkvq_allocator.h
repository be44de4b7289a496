// PM-KVQ's block-wise bit allocation (ALGORITHMS.md 4): per component (a layer, or a (layer, KV
// head)) one bit-width from a set B, minimising the summed first-order Taylor sensitivity s_{i,b}
// under a byte budget that counts codes, scales, zeros, sink and window for max_len tokens.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "alloc/kv_memory.h"

namespace mpkv {

struct PmkvqProblem {
  std::vector<int> bits;                         // B, e.g. {2, 4} or {2, 4, 8}; distinct
  std::vector<std::vector<double>> sensitivity;  // [component][j]: s_{i, bits[j]}
  KvMemorySpec memory;                           // one component's shape (heads = n_kv_heads per layer, 1 per head)
  int64_t budget_bytes = 0;                      // M, for all components together
};

struct PmkvqAllocation {
  std::vector<int> bits;            // [component] final bit-width
  double objective = 0;             // sum of the chosen sensitivities
  int64_t bytes = 0;                // memory of the allocation (<= budget_bytes)
  int64_t budget_bytes = 0;
  int64_t min_feasible_bytes = 0;   // every component at min(B)
};

// Builds the multiple-choice program (memory of every choice from kv_component_bytes) and solves it
// with GLPK. Error on malformed input or an infeasible budget (the message names the smallest feasible one).
PmkvqAllocation pmkvq_allocate(const PmkvqProblem& p);

void to_json(nlohmann::json& j, const PmkvqAllocation& a);
void from_json(const nlohmann::json& j, PmkvqAllocation& a);

}  // namespace mpkv

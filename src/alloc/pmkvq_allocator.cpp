#include "alloc/pmkvq_allocator.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "alloc/multiple_choice.h"
#include "util/error.h"

namespace mpkv {

PmkvqAllocation pmkvq_allocate(const PmkvqProblem& p) {
  MPKV_CHECK(!p.bits.empty(), "pmkvq: the set of bit-widths is empty");
  std::vector<int> sorted = p.bits;
  std::sort(sorted.begin(), sorted.end());
  MPKV_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "pmkvq: bit-widths repeat");
  MPKV_CHECK(!p.sensitivity.empty(), "pmkvq: no components");

  MultipleChoiceProblem mc;
  mc.budget_bytes = p.budget_bytes;
  std::vector<int64_t> bytes_per_choice;
  for (int b : p.bits) bytes_per_choice.push_back(kv_component_bytes(p.memory, b));  // validates bits and spec
  for (size_t i = 0; i < p.sensitivity.size(); ++i) {
    MPKV_CHECK(p.sensitivity[i].size() == p.bits.size(),
               "pmkvq: component " + std::to_string(i) + " has " + std::to_string(p.sensitivity[i].size()) +
                   " sensitivities for " + std::to_string(p.bits.size()) + " bit-widths");
    mc.cost.push_back(p.sensitivity[i]);
    mc.bytes.push_back(bytes_per_choice);
  }
  const MultipleChoiceSolution s = solve_multiple_choice(mc);

  PmkvqAllocation a;
  for (int c : s.choice) a.bits.push_back(p.bits[c]);
  a.objective = s.objective;
  a.bytes = s.bytes;
  a.budget_bytes = s.budget_bytes;
  a.min_feasible_bytes = s.min_feasible_bytes;
  return a;
}

void to_json(nlohmann::json& j, const PmkvqAllocation& a) {
  j = {{"bits", a.bits},
       {"objective", a.objective},
       {"bytes", a.bytes},
       {"budget_bytes", a.budget_bytes},
       {"min_feasible_bytes", a.min_feasible_bytes}};
}

void from_json(const nlohmann::json& j, PmkvqAllocation& a) {
  j.at("bits").get_to(a.bits);
  j.at("objective").get_to(a.objective);
  j.at("bytes").get_to(a.bytes);
  j.at("budget_bytes").get_to(a.budget_bytes);
  j.at("min_feasible_bytes").get_to(a.min_feasible_bytes);
}

}  // namespace mpkv

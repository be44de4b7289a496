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
  MPKV_CHECK(p.bytes.size() == p.sensitivity.size(), "pmkvq: " + std::to_string(p.bytes.size()) +
                                                         " byte rows for " + std::to_string(p.sensitivity.size()) +
                                                         " components");
  for (size_t i = 0; i < p.sensitivity.size(); ++i) {
    MPKV_CHECK(p.sensitivity[i].size() == p.bits.size() && p.bytes[i].size() == p.bits.size(),
               "pmkvq: component " + std::to_string(i) + " has " + std::to_string(p.sensitivity[i].size()) +
                   " sensitivities and " + std::to_string(p.bytes[i].size()) + " byte counts for " +
                   std::to_string(p.bits.size()) + " bit-widths");
    for (int64_t b : p.bytes[i]) MPKV_CHECK(b >= 0, "pmkvq: negative byte count");
    mc.cost.push_back(p.sensitivity[i]);
    mc.bytes.push_back(p.bytes[i]);
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

#include "alloc/ratequant_allocator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace mpkv {

double am_gm_ratio(const RateQuantProblem& p) {
  validate(p);
  // Weights are scaled by their maximum first so neither mean under- or overflows; the ratio is scale-free.
  double w_max = 0;
  for (const RateComponent& c : p.components) w_max = std::max(w_max, c.weight);
  double sum = 0, sum_log = 0;
  for (const RateComponent& c : p.components) sum += c.weight / w_max, sum_log += std::log(c.weight / w_max);
  const double n = (double)p.components.size();
  return (sum / n) / std::exp(sum_log / n);
}

RateQuantResult ratequant_allocate(const RateQuantProblem& p, const std::vector<int>& allowed_in) {
  validate(p);
  RateQuantResult r;
  std::vector<int> allowed = allowed_in;
  if (allowed.empty())
    for (int b = p.min_bits; b <= p.max_bits; ++b) allowed.push_back(b);
  std::sort(allowed.begin(), allowed.end());
  MPKV_CHECK(std::adjacent_find(allowed.begin(), allowed.end()) == allowed.end(), "ratequant: bit-widths repeat");
  // Greedy is exact only for contiguous widths at equal costs; otherwise the knapsack.
  const bool contiguous = allowed.back() - allowed.front() + 1 == (int)allowed.size() && unit_costs(p);

  IntegerAllocation ia;
  if (contiguous) {
    MPKV_CHECK(allowed.front() >= p.min_bits && allowed.back() <= p.max_bits,
               "ratequant: bit-widths must lie in [" + std::to_string(p.min_bits) + ", " +
                   std::to_string(p.max_bits) + "]");
    RateQuantProblem q = p;
    q.min_bits = allowed.front();
    q.max_bits = allowed.back();
    ia = greedy_integer_bits(q);
    r.integerization = "greedy";
  } else {
    ia = knapsack_integer_bits(p, allowed);
    r.integerization = "knapsack";
  }
  const ContinuousAllocation ca = water_fill(p, allowed.front(), allowed.back());

  r.bits = ia.bits;
  r.continuous_bits = ca.bits;
  r.allowed_bits = allowed;
  r.bit_budget = ia.bit_budget;
  r.bit_sum = ia.bit_sum;
  r.predicted_gain_am_gm = am_gm_ratio(p);
  r.objective = ia.objective;
  r.objective_continuous = ca.objective;
  r.objective_uniform = weighted_distortion(p, std::vector<double>(p.components.size(), p.avg_bits));
  r.achieved_gain = r.objective_uniform / r.objective;
  return r;
}

std::string describe(const RateQuantResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "ratequant (%s): %zu components, %lld of %lld bits, predicted gain (AM/GM of w) %.4f, "
                "achieved objective %.6g vs uniform %.6g (gain %.4f), continuous optimum %.6g",
                r.integerization.c_str(), r.bits.size(), (long long)r.bit_sum, (long long)r.bit_budget,
                r.predicted_gain_am_gm, r.objective, r.objective_uniform, r.achieved_gain, r.objective_continuous);
  return buf;
}

void to_json(nlohmann::json& j, const RateQuantResult& r) {
  j = {{"bits", r.bits},
       {"continuous_bits", r.continuous_bits},
       {"integerization", r.integerization},
       {"allowed_bits", r.allowed_bits},
       {"bit_budget", r.bit_budget},
       {"bit_sum", r.bit_sum},
       {"predicted_gain_am_gm", r.predicted_gain_am_gm},
       {"objective", r.objective},
       {"objective_continuous", r.objective_continuous},
       {"objective_uniform", r.objective_uniform},
       {"achieved_gain", r.achieved_gain}};
}

void from_json(const nlohmann::json& j, RateQuantResult& r) {
  j.at("bits").get_to(r.bits);
  j.at("continuous_bits").get_to(r.continuous_bits);
  j.at("integerization").get_to(r.integerization);
  j.at("allowed_bits").get_to(r.allowed_bits);
  j.at("bit_budget").get_to(r.bit_budget);
  j.at("bit_sum").get_to(r.bit_sum);
  j.at("predicted_gain_am_gm").get_to(r.predicted_gain_am_gm);
  j.at("objective").get_to(r.objective);
  j.at("objective_continuous").get_to(r.objective_continuous);
  j.at("objective_uniform").get_to(r.objective_uniform);
  j.at("achieved_gain").get_to(r.achieved_gain);
}

}  // namespace mpkv

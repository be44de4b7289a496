#include "alloc/rate_model.h"

#include <cmath>
#include <string>

#include "util/error.h"

namespace mpkv {

double distortion(const DistortionModel& m, double bits) { return m.alpha * std::pow(m.beta, -bits); }

void validate(const RateQuantProblem& p) {
  MPKV_CHECK(!p.components.empty(), "ratequant: no components");
  for (size_t i = 0; i < p.components.size(); ++i) {
    const RateComponent& c = p.components[i];
    const std::string where = "ratequant: component " + std::to_string(i);
    MPKV_CHECK(std::isfinite(c.weight) && c.weight > 0,
               where + ": weight must be finite and > 0, got " + std::to_string(c.weight));
    MPKV_CHECK(std::isfinite(c.model.alpha) && c.model.alpha > 0,
               where + ": alpha must be finite and > 0, got " + std::to_string(c.model.alpha));
    MPKV_CHECK(std::isfinite(c.model.beta) && c.model.beta > 1,
               where + ": beta must be finite and > 1, got " + std::to_string(c.model.beta));
    MPKV_CHECK(c.cost >= 1, where + ": cost must be >= 1, got " + std::to_string(c.cost));
  }
  const int floor_bits = p.min_max_quantizer ? 2 : 1;
  MPKV_CHECK(p.min_bits >= floor_bits,
             "ratequant: min_bits " + std::to_string(p.min_bits) + " is below " + std::to_string(floor_bits) +
                 (p.min_max_quantizer ? " (1-bit min-max error exceeds the signal's variance)" : ""));
  MPKV_CHECK(p.max_bits >= p.min_bits && p.max_bits <= 16, "ratequant: max_bits " + std::to_string(p.max_bits) +
                                                               " must lie in [min_bits, 16]");
  MPKV_CHECK(std::isfinite(p.avg_bits) && p.avg_bits >= p.min_bits && p.avg_bits <= p.max_bits,
             "ratequant: average bits " + std::to_string(p.avg_bits) + " outside [" + std::to_string(p.min_bits) +
                 ", " + std::to_string(p.max_bits) + "]");
}

int64_t total_cost(const RateQuantProblem& p) {
  int64_t s = 0;
  for (const RateComponent& c : p.components) s += c.cost;
  return s;
}

bool unit_costs(const RateQuantProblem& p) { return total_cost(p) == (int64_t)p.components.size(); }

int64_t integer_bit_budget(const RateQuantProblem& p) {
  // The epsilon keeps 30 * 2.1 = 62.99999... from rounding down a whole bit.
  return (int64_t)std::floor((double)total_cost(p) * p.avg_bits + 1e-9);
}

int64_t cost_of(const RateQuantProblem& p, const std::vector<int>& bits) {
  MPKV_CHECK(bits.size() == p.components.size(), "ratequant: " + std::to_string(bits.size()) + " bit-widths for " +
                                                      std::to_string(p.components.size()) + " components");
  int64_t s = 0;
  for (size_t i = 0; i < bits.size(); ++i) s += (int64_t)p.components[i].cost * bits[i];
  return s;
}

double weighted_distortion(const RateQuantProblem& p, const std::vector<double>& bits) {
  MPKV_CHECK(bits.size() == p.components.size(), "ratequant: " + std::to_string(bits.size()) + " bit-widths for " +
                                                      std::to_string(p.components.size()) + " components");
  double j = 0;
  for (size_t i = 0; i < bits.size(); ++i) j += p.components[i].weight * distortion(p.components[i].model, bits[i]);
  return j;
}

double weighted_distortion(const RateQuantProblem& p, const std::vector<int>& bits) {
  return weighted_distortion(p, std::vector<double>(bits.begin(), bits.end()));
}

}  // namespace mpkv

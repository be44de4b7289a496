#include "alloc/integer_bits.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <string>

#include "util/error.h"

namespace mpkv {

namespace {

void finish(const RateQuantProblem& p, IntegerAllocation& a) {
  a.bit_sum = cost_of(p, a.bits);
  a.objective = weighted_distortion(p, a.bits);
}

}  // namespace

IntegerAllocation greedy_integer_bits(const RateQuantProblem& p) {
  validate(p);
  MPKV_CHECK(unit_costs(p), "ratequant greedy: components with different costs per bit need the knapsack");
  const int n = (int)p.components.size();
  IntegerAllocation a;
  a.bit_budget = integer_bit_budget(p);
  MPKV_CHECK(a.bit_budget >= (int64_t)n * p.min_bits,
             "ratequant: bit budget " + std::to_string(a.bit_budget) + " below " + std::to_string(n) + " x " +
                 std::to_string(p.min_bits) + " bits");
  a.bits.assign(n, p.min_bits);

  // Max-heap of (gain of the next bit, -index): ties go to the lower index, so the result is deterministic.
  using Step = std::pair<double, int>;
  std::priority_queue<Step> heap;
  auto gain = [&](int i) {
    const RateComponent& c = p.components[i];
    return c.weight * (distortion(c.model, a.bits[i]) - distortion(c.model, a.bits[i] + 1));
  };
  for (int i = 0; i < n; ++i)
    if (a.bits[i] < p.max_bits) heap.push({gain(i), -i});
  int64_t left = a.bit_budget - (int64_t)n * p.min_bits;
  while (left > 0 && !heap.empty()) {
    const int i = -heap.top().second;
    heap.pop();
    ++a.bits[i];
    --left;
    if (a.bits[i] < p.max_bits) heap.push({gain(i), -i});
  }
  finish(p, a);
  return a;
}

IntegerAllocation knapsack_integer_bits(const RateQuantProblem& p, const std::vector<int>& allowed_in) {
  validate(p);
  MPKV_CHECK(!allowed_in.empty(), "ratequant knapsack: empty set of bit-widths");
  std::vector<int> allowed = allowed_in;
  std::sort(allowed.begin(), allowed.end());
  MPKV_CHECK(std::adjacent_find(allowed.begin(), allowed.end()) == allowed.end(),
             "ratequant knapsack: bit-widths repeat");
  MPKV_CHECK(allowed.front() >= p.min_bits && allowed.back() <= p.max_bits,
             "ratequant knapsack: bit-widths must lie in [" + std::to_string(p.min_bits) + ", " +
                 std::to_string(p.max_bits) + "]");
  const int n = (int)p.components.size();
  IntegerAllocation a;
  a.bit_budget = integer_bit_budget(p);
  MPKV_CHECK(a.bit_budget >= total_cost(p) * allowed.front(),
             "ratequant knapsack: average " + std::to_string(p.avg_bits) + " bits cannot give every component " +
                 std::to_string(allowed.front()) + " bits; the smallest feasible average is " +
                 std::to_string(allowed.front()));
  // Every component takes at least min(allowed): the table runs over the extra bits only.
  const int64_t cap = a.bit_budget - total_cost(p) * allowed.front();
  MPKV_CHECK((double)n * (double)(cap + 1) <= 2e8, "ratequant knapsack: table too large");
  const size_t width = (size_t)cap + 1;

  // best[s]: least objective of the components so far using exactly s extra bits (inf: unreachable).
  // pick[i * width + s]: the set index component i took on that best path.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(width, inf), next(width);
  std::vector<uint8_t> pick((size_t)n * width, 0);
  best[0] = 0;
  for (int i = 0; i < n; ++i) {
    std::fill(next.begin(), next.end(), inf);
    for (size_t s = 0; s < width; ++s) {
      if (best[s] == inf) continue;
      for (size_t j = 0; j < allowed.size(); ++j) {
        const size_t s2 = s + (size_t)p.components[i].cost * (size_t)(allowed[j] - allowed.front());
        if (s2 >= width) break;  // allowed is sorted
        const double v = best[s] + p.components[i].weight * distortion(p.components[i].model, allowed[j]);
        if (v < next[s2]) next[s2] = v, pick[(size_t)i * width + s2] = (uint8_t)j;
      }
    }
    best.swap(next);
  }
  size_t s = (size_t)(std::min_element(best.begin(), best.end()) - best.begin());
  a.bits.assign(n, 0);
  for (int i = n - 1; i >= 0; --i) {
    const int b = allowed[pick[(size_t)i * width + s]];
    a.bits[i] = b;
    s -= (size_t)p.components[i].cost * (size_t)(b - allowed.front());
  }
  finish(p, a);
  return a;
}

void to_json(nlohmann::json& j, const IntegerAllocation& a) {
  j = {{"bits", a.bits}, {"bit_sum", a.bit_sum}, {"bit_budget", a.bit_budget}, {"objective", a.objective}};
}

void from_json(const nlohmann::json& j, IntegerAllocation& a) {
  j.at("bits").get_to(a.bits);
  j.at("bit_sum").get_to(a.bit_sum);
  j.at("bit_budget").get_to(a.bit_budget);
  j.at("objective").get_to(a.objective);
}

}  // namespace mpkv

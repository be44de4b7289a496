#include "alloc/water_filling.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "util/error.h"

namespace mpkv {

namespace {

// b_i(t) = clip(a_i + k_i t, lo, hi) with k_i = 1 / ln beta_i; c: the component's cost per bit.
struct Line {
  double a, k, c;
};

double clip_line(const Line& l, double t, double lo, double hi) { return std::clamp(l.a + l.k * t, lo, hi); }

double total(const std::vector<Line>& lines, double t, double lo, double hi) {
  double s = 0;
  for (const Line& l : lines) s += l.c * clip_line(l, t, lo, hi);
  return s;
}

}  // namespace

ContinuousAllocation water_fill(const RateQuantProblem& p) {
  return water_fill(p, (double)p.min_bits, (double)p.max_bits);
}

ContinuousAllocation water_fill(const RateQuantProblem& p, double lo, double hi) {
  validate(p);
  MPKV_CHECK(lo <= p.avg_bits && p.avg_bits <= hi, "water filling: average bits " + std::to_string(p.avg_bits) +
                                                       " outside the bounds [" + std::to_string(lo) + ", " +
                                                       std::to_string(hi) + "]");
  const size_t n = p.components.size();
  const double target = (double)total_cost(p) * p.avg_bits;

  std::vector<Line> lines(n);
  std::vector<double> breaks;  // t where a component reaches lo or hi
  breaks.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const RateComponent& c = p.components[i];
    const double ln_beta = std::log(c.model.beta);
    lines[i] = {std::log(c.model.alpha * c.weight * ln_beta / c.cost) / ln_beta, 1.0 / ln_beta, (double)c.cost};
    breaks.push_back((lo - lines[i].a) / lines[i].k);
    breaks.push_back((hi - lines[i].a) / lines[i].k);
  }
  std::sort(breaks.begin(), breaks.end());
  // total() is lo * C at breaks.front() and hi * C at breaks.back(); find the first breakpoint whose
  // total reaches the target, then interpolate linearly on the segment before it (no breakpoint inside).
  size_t first = 0, last = breaks.size() - 1;
  while (first < last) {
    const size_t mid = (first + last) / 2;
    if (total(lines, breaks[mid], lo, hi) >= target) last = mid;
    else first = mid + 1;
  }
  double t = breaks[first];
  if (first > 0) {
    const double t0 = breaks[first - 1], t1 = breaks[first];
    const double s0 = total(lines, t0, lo, hi), s1 = total(lines, t1, lo, hi);
    if (s1 > s0) t = t0 + (target - s0) * (t1 - t0) / (s1 - s0);
  }

  ContinuousAllocation a;
  a.level = t;
  a.bits.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const double raw = lines[i].a + lines[i].k * t;
    a.bits[i] = std::clamp(raw, lo, hi);
    a.n_at_min += raw <= lo;
    a.n_at_max += raw >= hi;
  }
  a.objective = weighted_distortion(p, a.bits);
  return a;
}

void to_json(nlohmann::json& j, const ContinuousAllocation& a) {
  j = {{"bits", a.bits}, {"level", a.level}, {"n_at_min", a.n_at_min}, {"n_at_max", a.n_at_max},
       {"objective", a.objective}};
}

void from_json(const nlohmann::json& j, ContinuousAllocation& a) {
  j.at("bits").get_to(a.bits);
  j.at("level").get_to(a.level);
  j.at("n_at_min").get_to(a.n_at_min);
  j.at("n_at_max").get_to(a.n_at_max);
  j.at("objective").get_to(a.objective);
}

}  // namespace mpkv

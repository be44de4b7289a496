#include "eval/block_bootstrap.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "util/error.h"

namespace mpkv {

namespace {

// Per-block sums: of x, of y, and counts.
struct BlockSums {
  std::vector<double> x, y;
  std::vector<int64_t> n;
};

BlockSums block_sums(const std::vector<double>& x, const std::vector<double>* y, const std::vector<int32_t>& block_of) {
  // Callers pair series they built together: a mismatch is a bug, not bad input.
  MPKV_ASSERT(x.size() == block_of.size() && (!y || y->size() == x.size()),
              "bootstrap: values and block ids must have the same length");
  MPKV_CHECK(!x.empty(), "bootstrap: no values");
  const int32_t nb = *std::max_element(block_of.begin(), block_of.end()) + 1;
  BlockSums s{std::vector<double>(nb), std::vector<double>(nb), std::vector<int64_t>(nb)};
  for (size_t i = 0; i < x.size(); ++i) {
    const int32_t b = block_of[i];
    MPKV_ASSERT(b >= 0, "bootstrap: negative block id");
    s.x[b] += x[i];
    if (y) s.y[b] += (*y)[i];
    ++s.n[b];
  }
  return s;
}

// Percentile interval of stat(sum x, sum y, count) over resamples of whole blocks.
Interval resample(const BlockSums& s, const BootstrapOptions& o, const std::function<double(double, double, int64_t)>& stat) {
  MPKV_CHECK(o.resamples >= 10, "bootstrap: need at least 10 resamples");
  MPKV_CHECK(o.level > 0 && o.level < 1, "bootstrap: level must be in (0, 1)");
  const uint64_t nb = s.n.size();
  std::mt19937_64 rng(o.seed);
  std::vector<double> stats(o.resamples);
  for (int r = 0; r < o.resamples; ++r) {
    double sx = 0, sy = 0;
    int64_t n = 0;
    for (uint64_t k = 0; k < nb; ++k) {
      const uint64_t b = (uint64_t)(((unsigned __int128)rng() * nb) >> 64);  // uniform in [0, nb)
      sx += s.x[b];
      sy += s.y[b];
      n += s.n[b];
    }
    stats[r] = stat(sx, sy, n);
  }
  std::sort(stats.begin(), stats.end());
  // Linear interpolation between order statistics at the (1 - level) / 2 and (1 + level) / 2 quantiles.
  auto quantile = [&](double q) {
    const double pos = q * (stats.size() - 1);
    const size_t i = (size_t)pos;
    const double f = pos - i;
    return i + 1 < stats.size() ? stats[i] * (1 - f) + stats[i + 1] * f : stats[i];
  };
  return {quantile((1 - o.level) / 2), quantile((1 + o.level) / 2)};
}

}  // namespace

std::vector<int32_t> bootstrap_blocks(const std::vector<int32_t>& stream, int block) {
  MPKV_CHECK(block >= 1, "bootstrap: block length must be at least 1");
  std::map<int32_t, int64_t> seen;  // positions of each stream so far
  std::map<std::pair<int32_t, int64_t>, int32_t> ids;
  std::vector<int32_t> out(stream.size());
  for (size_t i = 0; i < stream.size(); ++i) {
    const int64_t k = seen[stream[i]]++ / block;
    auto it = ids.try_emplace({stream[i], k}, (int32_t)ids.size()).first;
    out[i] = it->second;
  }
  return out;
}

Interval bootstrap_mean(const std::vector<double>& x, const std::vector<int32_t>& block_of, const BootstrapOptions& o) {
  return resample(block_sums(x, nullptr, block_of), o, [](double sx, double, int64_t n) { return sx / n; });
}

Interval bootstrap_ppl_delta_pct(const std::vector<double>& x, const std::vector<double>& y,
                                 const std::vector<int32_t>& block_of, const BootstrapOptions& o) {
  return resample(block_sums(x, &y, block_of), o,
                  [](double sx, double sy, int64_t n) { return 100.0 * (std::exp((sx - sy) / n) - 1.0); });
}

}  // namespace mpkv

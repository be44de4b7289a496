// Block bootstrap 95% intervals for `mpkv eval` (docs/algorithms.md §9.1).
//
// Scored positions are not independent: neighbouring tokens share context, and one badly quantized
// key or value moves the distribution at many positions after it. Resampling single positions would
// treat them as independent and give intervals that are too narrow. So the positions of each stream
// (one text window) are cut into consecutive blocks of `block` positions (the last block of a
// stream may be shorter), and a resample draws as many blocks as there are, uniformly with
// replacement. The interval is the percentile interval of the statistic over the resamples.
//
// Paired statistics (dPPL) resample the same blocks for the method and the reference, so the text's
// own difficulty, shared by both, cancels.
//
// A fixed seed (std::mt19937_64, blocks drawn by the multiply-shift map of its 64-bit outputs) makes
// reruns give the same interval.
#pragma once
#include <cstdint>
#include <vector>

namespace mpkv {

struct BootstrapOptions {
  int block = 256;          // positions per block (see docs/algorithms.md §9.1 for the choice)
  int resamples = 2000;
  double level = 0.95;      // central interval
  uint64_t seed = 20261130;
};

struct Interval {
  double lo = 0, hi = 0;
};

// Block id of each position: consecutive runs of `block` positions of the same stream, in order of
// each stream's positions; ids are dense from 0. Throws Error when block < 1 or the sizes differ.
std::vector<int32_t> bootstrap_blocks(const std::vector<int32_t>& stream, int block);

// Interval of the mean of `x`.
Interval bootstrap_mean(const std::vector<double>& x, const std::vector<int32_t>& block_of, const BootstrapOptions& o);

// Interval of 100 * (exp(mean(x) - mean(y)) - 1): the relative perplexity change of a method with
// per-position NLL x against a reference with NLL y at the same positions (paired).
Interval bootstrap_ppl_delta_pct(const std::vector<double>& x, const std::vector<double>& y,
                                 const std::vector<int32_t>& block_of, const BootstrapOptions& o);

}  // namespace mpkv

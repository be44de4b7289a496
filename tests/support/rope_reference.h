// RoPE in double, written from docs/models.md ("RoPE", "YaRN"), for the tests that hold the
// engine's rotation (tests/unit/test_model_ops_rope.cpp) and its forward pass
// (tests/unit/test_forward_reference.cpp) to it. Independent of src/: nothing here calls mpkv.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace mpkv::test {

struct RefRope {
  bool adjacent = false;           // pairs (2j, 2j+1); else (j, j + hd/2)
  double base = 10000.0;
  double scale = 1.0;              // positions divided by it (linear; yarn: the interpolated part)
  std::vector<double> freq_factors;  // pair j's frequency divided by it; empty: 1
  int yarn_n_ctx_orig = 0;         // > 0: YaRN with beta_fast 32, beta_slow 1
  double attn_factor = 1.0;        // cos and sin multiplied by it
};

// Rotates x [n_heads][hd] of a token at position pos: pair j by theta_j, then times mscale, where
//   extrap = pos * base^(-2j / hd) / ff_j,  theta_j = extrap / scale * (1 - mix_j) + extrap * mix_j
//   mix_j  = 1 - clamp((j - low) / max(0.001, high - low), 0, 1) with YaRN, else 0
//   low = max(0, floor(corr(32))), high = min(hd - 1, ceil(corr(1))),
//   corr(b) = hd ln(n_ctx_orig / (2 pi b)) / (2 ln base)
//   mscale = attn_factor * (YaRN and scale > 1 ? 1 + 0.1 ln scale : 1)
inline void rope_reference(double* x, int n_heads, int hd, double pos, const RefRope& r) {
  double low = 0, high = 0, mscale = r.attn_factor;
  const bool yarn = r.yarn_n_ctx_orig > 0;
  if (yarn) {
    auto corr = [&](double b) { return hd * std::log(r.yarn_n_ctx_orig / (2 * M_PI * b)) / (2 * std::log(r.base)); };
    low = std::max(0.0, std::floor(corr(32)));
    high = std::min(hd - 1.0, std::ceil(corr(1)));
    if (r.scale > 1) mscale *= 1 + 0.1 * std::log(r.scale);
  }
  for (int j = 0; j < hd / 2; ++j) {
    const double extrap = pos * std::pow(r.base, -2.0 * j / hd) / (r.freq_factors.empty() ? 1.0 : r.freq_factors[j]);
    const double mix = yarn ? 1 - std::clamp((j - low) / std::max(0.001, high - low), 0.0, 1.0) : 0.0;
    const double th = extrap / r.scale * (1 - mix) + extrap * mix;
    const int a = r.adjacent ? 2 * j : j, b = r.adjacent ? 2 * j + 1 : j + hd / 2;
    for (int h = 0; h < n_heads; ++h) {
      const double x0 = x[h * hd + a], x1 = x[h * hd + b];
      x[h * hd + a] = mscale * (x0 * std::cos(th) - x1 * std::sin(th));
      x[h * hd + b] = mscale * (x0 * std::sin(th) + x1 * std::cos(th));
    }
  }
}

}  // namespace mpkv::test

// Helpers shared by the paged attention kernel tests (test_kvcache_attention_kernels.cpp,
// test_kvcache_attention_q8.cpp): the kernel variants this CPU runs, random vectors, and x_hat of a
// packed block by the layout's definition (kv_block_layout.h), scale_mult included.
#pragma once
#include <random>
#include <vector>

#include "quant/kv_block_layout.h"
#include "quant/quant_kernels.h"
#include "util/cpu_features.h"
#include "util/fp16.h"

namespace mpkv::test {

inline std::vector<Isa> kernel_variants() {
  std::vector<Isa> v{Isa::scalar};
  if (best_isa() >= Isa::avx2) v.push_back(Isa::avx2);
  if (best_isa() >= Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

// N(0, 1) + 0.3, every 13th value (from the 6th) times spread_every when it is > 0.
inline std::vector<float> gaussian(size_t n, uint32_t seed, float spread_every = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = nd(rng) * (spread_every > 0 && i % 13 == 5 ? spread_every : 1.0f) + 0.3f;
  return x;
}

// x_hat[t, c] of a uniform block in double: code * (S * scale_mult) + Z.
inline double uniform_x_hat(const KvBlockLayout& L, const uint8_t* blk, int t, int c) {
  const size_t pi = L.param_index(t, c);
  const double S = fp16_to_fp32(load_half(blk, L.scales_offset, pi)), Z = fp16_to_fp32(load_half(blk, L.zeros_offset, pi));
  return (double)get_code(L, blk, t, c) * S * L.scale_mult + Z;
}

// x_hat of a whole block [tokens, head_dim] in code space: uniform by uniform_x_hat, Lloyd-Max
// through the quantizer library's dequantize_ref.
inline std::vector<double> block_x_hat(const KvBlockLayout& L, const uint8_t* blk) {
  std::vector<double> x((size_t)L.tokens * L.head_dim);
  if (L.codec == Codec::lloyd_max) {
    std::vector<float> f(x.size());
    dequantize_ref(L, blk, 0, L.tokens, f.data(), L.head_dim);
    for (size_t i = 0; i < x.size(); ++i) x[i] = f[i];
    return x;
  }
  for (int t = 0; t < L.tokens; ++t)
    for (int c = 0; c < L.head_dim; ++c) x[(size_t)t * L.head_dim + c] = uniform_x_hat(L, blk, t, c);
  return x;
}

}  // namespace mpkv::test

// Attention over shrunk blocks reads the exact ladder scale (docs/numerics.md, "Exact ladder
// scales"; kv_block_layout.h scale_mult): blocks quantized at 16 bits and shrunk down
// 16 -> 8 -> 4 -> 2 by the equivalent right shift are scored and accumulated by every variant of the paged attention kernels (float
// and int8 queries) against double sums over the values DEFINED by direct requantization of the
// 16-bit codes: code_b = round_half_up(X_16 / M), x = code_b * S_16 * M + Z, M = (2^16-1)/(2^b-1).
// A kernel that forgets scale_mult is off by the factor M and fails at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <string>

#include "attention/paged_attention.h"
#include "attention/paged_attention_kernels.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_kernels.h"
#include "util/cpu_features.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

// As test_kvcache_attention_kernels: fp32 sums in another order against double sums.
double scores_tolerance(int d, double abs_terms) { return (d / 8 + 16) * FLT_EPSILON * abs_terms; }
constexpr double kAccumulateRelPerRow = 6 * FLT_EPSILON;
// int8 queries: the integer dot is exact; the epilogue S * (scale * acc) + Z * sum rounds a few times.
constexpr double kQ8EpilogueRel = 4 * FLT_EPSILON;

// Every kernel variant this CPU runs.
std::vector<Isa> runnable_isas() {
  std::vector<Isa> v{Isa::scalar};
  for (Isa isa : {Isa::avx2, Isa::avx512})
    if (best_isa() >= isa) v.push_back(isa);
  return v;
}

// (options at 16 bits, tokens): token-axis groups of head_dim, 32 and 16 channels (the SIMD fast
// paths) and KIVI keys (channel axis).
std::vector<std::pair<QuantOptions, int>> blocks() {
  return {{{QuantMethod::uniform, KvRole::key, 16, 64, 0}, 64},
          {{QuantMethod::uniform, KvRole::value, 16, 64, 32}, 48},
          {{QuantMethod::uniform, KvRole::key, 16, 128, 16}, 32},
          {{QuantMethod::kivi, KvRole::key, 16, 64, 8}, 32}};
}

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng) * scale + 0.3f;
  return x;
}

// x [tokens, d] in code space by the definition above, from the 16-bit block.
std::vector<double> direct_values(const KvBlockLayout& L16, const uint8_t* b16, int bits) {
  const uint64_t m = 65535u / ((1u << bits) - 1u);
  std::vector<double> x((size_t)L16.tokens * L16.head_dim);
  for (int t = 0; t < L16.tokens; ++t) {
    for (int c = 0; c < L16.head_dim; ++c) {
      const uint64_t x16 = get_code(L16, b16, t, c);
      const uint64_t code = (2 * x16 + m) / (2 * m);  // round half up of x16 / m
      const size_t pi = L16.param_index(t, c);
      const double s = fp16_to_fp32(load_half(b16, L16.scales_offset, pi));
      const double z = fp16_to_fp32(load_half(b16, L16.zeros_offset, pi));
      x[(size_t)t * L16.head_dim + c] = (double)code * s * (double)m + z;
    }
  }
  return x;
}

TEST(ShrunkAttention, EveryVariantReadsTheExactLadderScale) {
  for (const auto& [o, tokens] : blocks()) {
    const int d = o.head_dim;
    const KvQuantizer q16(o, quant_kernels_for(Isa::scalar));
    const KvBlockLayout L16 = q16.block_layout(tokens);
    std::vector<uint8_t> b16(L16.bytes);
    const auto x = gaussian((size_t)tokens * d, 11, 3.0f);
    q16.quantize(L16, x.data(), d, 0, tokens, b16.data());
    KvBlockLayout L = L16;
    std::vector<uint8_t> blk = b16;
    while (L.bits > 2) {
      const KvBlockLayout H = halved_layout(L);
      std::vector<uint8_t> out(H.bytes);
      shrink_block(L, blk.data(), H, out.data(), quant_kernels_for(Isa::scalar));
      L = H;
      blk.swap(out);
      const std::vector<double> xh = direct_values(L16, b16.data(), L.bits);
      const PackedBlockView view{&L, blk.data(), nullptr};
      const int nq = 3, n = tokens;
      const auto q = gaussian((size_t)nq * d, 100);
      const auto w = gaussian((size_t)nq * kMaxKernelRows, 200);
      std::vector<double> s_ref((size_t)nq * n, 0.0), s_abs((size_t)nq * n, 0.0);
      std::vector<double> a_ref((size_t)nq * d, 0.0), a_abs((size_t)nq * d, 0.0);
      for (int j = 0; j < nq; ++j)
        for (int i = 0; i < n; ++i)
          for (int c = 0; c < d; ++c) {
            const double xv = xh[(size_t)i * d + c], qv = q[(size_t)j * d + c];
            const double wv = w[(size_t)j * kMaxKernelRows + i];
            s_ref[(size_t)j * n + i] += qv * xv;
            s_abs[(size_t)j * n + i] += std::abs(qv) * (std::abs(xv) + 4);
            a_ref[(size_t)j * d + c] += wv * xv;
            a_abs[(size_t)j * d + c] += std::abs(wv) * (std::abs(xv) + 4);
          }
      std::vector<int8_t> qbytes;
      std::vector<float> qparams;
      const Q8Queries q8 = quantize_queries_q8(q.data(), d, nq, d, qbytes, qparams);
      for (Isa isa : runnable_isas()) {
        const PagedAttentionKernels& K = paged_attention_kernels_for(isa);
        const std::string what = std::string(isa_name(isa)) + " " + method_name(o.method) + " d " +
                                 std::to_string(d) + " G " + std::to_string(L.group) + " bits " +
                                 std::to_string(L.bits);
        std::vector<float> s((size_t)nq * kMaxKernelRows, NAN);
        K.packed_scores(view, q.data(), d, nq, 0, n, s.data(), kMaxKernelRows);
        for (int j = 0; j < nq; ++j)
          for (int i = 0; i < n; ++i)
            ASSERT_NEAR(s[(size_t)j * kMaxKernelRows + i], s_ref[(size_t)j * n + i],
                        scores_tolerance(d, s_abs[(size_t)j * n + i]))
                << what << " q " << j << " row " << i;
        std::vector<float> acc((size_t)nq * d, 0.0f);
        K.packed_accumulate(view, w.data(), kMaxKernelRows, nq, 0, n, acc.data(), d);
        for (int j = 0; j < nq; ++j)
          for (int c = 0; c < d; ++c)
            ASSERT_NEAR(acc[(size_t)j * d + c], a_ref[(size_t)j * d + c],
                        kAccumulateRelPerRow * (1 + a_abs[(size_t)j * d + c]))
                << what << " q " << j << " channel " << c;
        if (!q8_scores_apply(L)) continue;
        std::vector<float> s8((size_t)nq * kMaxKernelRows, NAN);
        K.packed_scores_q8(view, q8, 0, n, s8.data(), kMaxKernelRows);
        const double m = 65535.0 / ((1u << L.bits) - 1u);
        for (int j = 0; j < nq; ++j) {
          for (int i = 0; i < n; ++i) {
            const double got = s8[(size_t)j * kMaxKernelRows + i];
            if (L.axis == GroupAxis::token) {
              // One (scale, zero) per token: the integer dot with the direct scale and zero, exactly.
              int64_t dot = 0;
              for (int c = 0; c < d; ++c) dot += (int64_t)q8.natural[(size_t)j * d + c] * get_code(L, blk.data(), i, c);
              const double S = (double)fp16_to_fp32(load_half(b16.data(), L16.scales_offset, (size_t)i)) * m;
              const double Z = fp16_to_fp32(load_half(b16.data(), L16.zeros_offset, (size_t)i));
              const double ref = S * q8.scale[j] * (double)dot + Z * q8.sum[j];
              const double mag = std::abs(S * q8.scale[j] * (double)dot) + std::abs(Z * q8.sum[j]);
              ASSERT_NEAR(got, ref, kQ8EpilogueRel * mag + 1e-30) << what << " int8 q " << j << " row " << i;
            } else {
              // Per-channel scales: whatever folds q * S into int8, the error is at most half an int8
              // step of max_c |q_c S_c| per unit of code (plus the float sums); a missing scale_mult
              // is off by the factor M.
              double qs_max = 0, codes = 0;
              for (int c = 0; c < d; ++c) {
                const double S = fp16_to_fp32(load_half(b16.data(), L16.scales_offset, L16.param_index(i, c))) * m;
                qs_max = std::max(qs_max, std::abs(q[(size_t)j * d + c] * S));
                codes += get_code(L, blk.data(), i, c);
              }
              ASSERT_NEAR(got, s_ref[(size_t)j * n + i],
                          0.5 * qs_max / 127.0 * codes + scores_tolerance(d, s_abs[(size_t)j * n + i]))
                  << what << " int8 q " << j << " row " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mpkv

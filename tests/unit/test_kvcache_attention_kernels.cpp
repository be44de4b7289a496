// Every variant of the paged attention kernels (_ref, AVX2, AVX-512) against double-precision
// sums over dequantized values (x_hat by the layout's definition, scale_mult 1 and not 1; Lloyd-Max
// through the quantizer library's dequantize_ref), for every codec, axis, bit-width and a range of
// query counts and row ranges. AVX-512 cases skip on CPUs without it. The int8-query scores are in
// test_kvcache_attention_q8.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <string>

#include "attention/paged_attention.h"
#include "attention/paged_attention_kernels.h"
#include "quant/kv_quantizer.h"
#include "quant/lloyd_max.h"
#include "quant/quant_kernels.h"
#include "test_attention_kernels_support.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

// Scores: fp32 sums of head_dim products in another order (and, for packed blocks, S and Z
// factored out of each group): error <= (summation depth) * eps * sum_c |q_c| |x_hat_c|, the
// depth below head_dim / 8 + 16 for every layout here (as the quantizer library's dot test).
double scores_tolerance(int d, double abs_terms) { return (d / 8 + 16) * FLT_EPSILON * abs_terms; }
// Accumulate: per row a few fp32 roundings of |w| (|code S| + |Z|) (w S folded first, FMA).
constexpr double kAccumulateRelPerRow = 6 * FLT_EPSILON;
// exp_sum: Cephes' expf polynomial (~2e-7 relative), plus the fp32 rounding of x = s - m, which
// moves exp(x) by up to |x| eps / 2 relative (the reference subtracts in double).
constexpr double kExpRel = 1e-6;
double exp_tolerance(double x) { return kExpRel + std::abs(x) * FLT_EPSILON; }

using test::gaussian;
constexpr auto variants = test::kernel_variants;

struct Shape {
  QuantMethod method;
  KvRole role;
  int d, group, tokens;
};

std::vector<Shape> shapes() {
  return {{QuantMethod::uniform, KvRole::key, 64, 0, 64},   {QuantMethod::uniform, KvRole::value, 64, 32, 48},
          {QuantMethod::uniform, KvRole::key, 128, 16, 32}, {QuantMethod::uniform, KvRole::key, 64, 8, 16},
          {QuantMethod::kivi, KvRole::key, 64, 8, 32},      {QuantMethod::kivi, KvRole::key, 128, 32, 64},
          {QuantMethod::turbo, KvRole::key, 64, 0, 32}};
}

TEST(PagedAttentionKernels, PackedScoresAndAccumulateMatchDequantizedDouble) {
  for (const Shape& sh : shapes()) {
    const std::vector<int> bits = sh.method == QuantMethod::turbo ? std::vector<int>{1, 2, 3, 4}
                                                                  : std::vector<int>{1, 2, 3, 4, 8, 16};
    for (int b : bits) {
      QuantOptions o;
      o.method = sh.method;
      o.role = sh.role;
      o.bits = b;
      o.head_dim = sh.d;
      o.group = sh.group;
      const KvQuantizer qz(o, quant_kernels_for(Isa::scalar));
      KvBlockLayout L = qz.block_layout(sh.tokens);
      std::vector<uint8_t> blk(L.bytes);
      const auto x = gaussian((size_t)sh.tokens * sh.d, 10 + b, 5.0f);
      quant_kernels_for(Isa::scalar).quantize(L, x.data(), sh.d, 0, sh.tokens, blk.data());
      // Uniform blocks are also read with scale_mult != 1 (the same bytes, true scales 0.37x).
      for (float mult : L.codec == Codec::uniform ? std::vector<float>{1.0f, 0.37f} : std::vector<float>{1.0f}) {
        L.scale_mult = mult;
        const std::vector<double> xh = test::block_x_hat(L, blk.data());  // code space
        const float* cent = L.codec == Codec::lloyd_max ? lloyd_max_gaussian(b).centroids_f.data() : nullptr;
        const PackedBlockView view{&L, blk.data(), cent};
        const int gt = sh.method == QuantMethod::kivi ? sh.group : 1;  // row ranges start on token groups
        for (int nq : {1, 3, 4, 7, 16}) {
          const auto q = gaussian((size_t)nq * sh.d, 100 + nq);
          const auto w = gaussian((size_t)nq * kMaxKernelRows, 200 + nq);
          for (auto [t0, n] : {std::pair<int, int>{0, sh.tokens}, {gt, sh.tokens - 2 * gt + 1}}) {
            if (n <= 0) continue;
            // Double references.
            std::vector<double> s_ref((size_t)nq * n), s_abs((size_t)nq * n), a_ref((size_t)nq * sh.d, 0.0),
                a_abs((size_t)nq * sh.d, 0.0);
            for (int j = 0; j < nq; ++j)
              for (int i = 0; i < n; ++i)
                for (int c = 0; c < sh.d; ++c) {
                  const double xv = xh[(size_t)(t0 + i) * sh.d + c];
                  s_ref[(size_t)j * n + i] += q[(size_t)j * sh.d + c] * xv;
                  s_abs[(size_t)j * n + i] += std::abs(q[(size_t)j * sh.d + c] * xv) + std::abs(q[(size_t)j * sh.d + c]) * 4;
                  a_ref[(size_t)j * sh.d + c] += w[(size_t)j * kMaxKernelRows + i] * xv;
                  a_abs[(size_t)j * sh.d + c] += std::abs(w[(size_t)j * kMaxKernelRows + i]) * (std::abs(xv) + 4);
                }
            for (Isa isa : variants()) {
              const PagedAttentionKernels& K = paged_attention_kernels_for(isa);
              const std::string what = std::string(isa_name(isa)) + " " + method_name(sh.method) + " bits " +
                                       std::to_string(b) + " d " + std::to_string(sh.d) + " G " + std::to_string(L.group) +
                                       " mult " + std::to_string(mult) +
                                       " nq " + std::to_string(nq) + " rows [" + std::to_string(t0) + ", +" + std::to_string(n) + ")";
              std::vector<float> s((size_t)nq * kMaxKernelRows, NAN);
              K.packed_scores(view, q.data(), sh.d, nq, t0, n, s.data(), kMaxKernelRows);
              for (int j = 0; j < nq; ++j)
                for (int i = 0; i < n; ++i)
                  ASSERT_NEAR(s[(size_t)j * kMaxKernelRows + i], s_ref[(size_t)j * n + i],
                              scores_tolerance(sh.d, s_abs[(size_t)j * n + i]))
                      << what << " q " << j << " row " << i;
              std::vector<float> acc((size_t)nq * (sh.d + 8), 0.5f);  // ldacc > d, starting from 0.5
              K.packed_accumulate(view, w.data(), kMaxKernelRows, nq, t0, n, acc.data(), sh.d + 8);
              for (int j = 0; j < nq; ++j) {
                for (int c = 0; c < sh.d; ++c)
                  ASSERT_NEAR(acc[(size_t)j * (sh.d + 8) + c], 0.5 + a_ref[(size_t)j * sh.d + c],
                              kAccumulateRelPerRow * (1 + a_abs[(size_t)j * sh.d + c]))
                      << what << " q " << j << " channel " << c;
                for (int c = sh.d; c < sh.d + 8; ++c) ASSERT_EQ(acc[(size_t)j * (sh.d + 8) + c], 0.5f) << what << " wrote past d";
              }
            }
          }
        }
      }  // scale_mult
    }
  }
}

TEST(PagedAttentionKernels, F16RowsMatchDouble) {
  for (int d : {64, 128, 24}) {
    const int n = 77, stride = d * 3;
    const auto xf = gaussian((size_t)n * stride, d);
    std::vector<uint16_t> x(xf.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = fp32_to_fp16(xf[i]);
    for (int nq : {1, 3, 5, 16}) {
      const auto q = gaussian((size_t)nq * d, 7 + nq);
      const auto w = gaussian((size_t)nq * n, 9 + nq);
      for (Isa isa : variants()) {
        const PagedAttentionKernels& K = paged_attention_kernels_for(isa);
        std::vector<float> s((size_t)nq * n), acc((size_t)nq * d, 0.0f);
        K.f16_scores(x.data(), stride, d, q.data(), d, nq, n, s.data(), n);
        K.f16_accumulate(x.data(), stride, d, w.data(), n, nq, n, acc.data(), d);
        for (int j = 0; j < nq; ++j) {
          for (int i = 0; i < n; ++i) {
            double r = 0, a = 0;
            for (int c = 0; c < d; ++c) {
              const double xv = fp16_to_fp32(x[(size_t)i * stride + c]);
              r += q[(size_t)j * d + c] * xv;
              a += std::abs(q[(size_t)j * d + c] * xv);
            }
            ASSERT_NEAR(s[(size_t)j * n + i], r, scores_tolerance(d, a)) << isa_name(isa) << " d " << d;
          }
          for (int c = 0; c < d; ++c) {
            double r = 0, a = 0;
            for (int i = 0; i < n; ++i) {
              const double xv = fp16_to_fp32(x[(size_t)i * stride + c]);
              r += w[(size_t)j * n + i] * xv;
              a += std::abs(w[(size_t)j * n + i] * xv);
            }
            ASSERT_NEAR(acc[(size_t)j * d + c], r, kAccumulateRelPerRow * (1 + a)) << isa_name(isa) << " d " << d;
          }
        }
      }
    }
  }
}

TEST(PagedAttentionKernels, ExpSumAndMaxMatchTheDefinitions) {
  for (int n : {1, 7, 8, 9, 64, 250}) {
    std::vector<float> s0(n);
    std::mt19937 rng(n);
    std::uniform_real_distribution<float> u(-90.0f, 3.0f);
    for (int i = 0; i < n; ++i) s0[i] = i % 5 == 4 ? -INFINITY : u(rng);
    const float m = 3.0f;
    for (Isa isa : variants()) {
      float ref_max = -INFINITY;
      for (float x : s0) ref_max = std::max(ref_max, x);
      ASSERT_EQ(paged_attention_kernels_for(isa).max_value(s0.data(), n), ref_max) << isa_name(isa) << " n " << n;
      ASSERT_EQ(paged_attention_kernels_for(isa).max_value(s0.data(), 0), -INFINITY) << isa_name(isa);
      std::vector<float> s = s0;
      const float sum = paged_attention_kernels_for(isa).exp_sum(s.data(), n, m);
      double ref_sum = 0;
      for (int i = 0; i < n; ++i) {
        const double e = std::exp((double)s0[i] - m);
        ref_sum += e;
        if (s0[i] == -INFINITY) {
          ASSERT_EQ(s[i], 0.0f) << isa_name(isa);
        } else if (s0[i] - m >= -87.0f) {
          ASSERT_NEAR(s[i], e, exp_tolerance(s0[i] - m) * e) << isa_name(isa) << " x " << s0[i] - m;
        } else {
          ASSERT_LE(s[i], 1.7e-38) << isa_name(isa);  // below exp(-87): flushed to 0 (or a denormal in _ref)
        }
      }
      ASSERT_NEAR(sum, ref_sum, exp_tolerance(93) * ref_sum + 1e-37) << isa_name(isa) << " n " << n;
    }
  }
}

// Value accumulation as the engine runs it over 16-bit pages (test_paged_engine.cpp,
// SixteenBitCodesMatchF16KvCacheOnTheRealModel): softmax weights (non-negative, summing to 1, a few
// rows dominant) over the longest kernel call (kMaxKernelRows rows), a KV head's 3 query heads
// times a 16-token prefill block (48 queries), values with a large offset next to their spread
// (so S code and Z are both large and the kernels' split sum_i w_i S_i code_i + sum_i w_i Z_i
// could lose digits), one group per row and groups of 16. Every tier must stay within a few fp32
// roundings of the double sum, relative to the largest output of the query (measured: 6-7 eps on
// every tier, AVX-512 the lowest); the per-row bound of
// PackedScoresAndAccumulateMatchDequantizedDouble, summed over rows, would allow far more.
constexpr double kSoftmaxAccumulateRel = 16 * FLT_EPSILON;

TEST(PagedAttentionKernels, PackedAccumulateSixteenBitMatchesDoubleSumOnEveryTier) {
  const int d = 64, n = kMaxKernelRows, nq = 48;
  for (int group : {0, 16}) {
    QuantOptions o;
    o.method = QuantMethod::uniform;
    o.role = KvRole::value;
    o.bits = 16;
    o.head_dim = d;
    o.group = group;
    const KvQuantizer qz(o, quant_kernels_for(Isa::scalar));
    const KvBlockLayout L = qz.block_layout(n);
    std::vector<uint8_t> blk(L.bytes);
    std::vector<float> x = gaussian((size_t)n * d, 7, 8.0f);
    for (float& v : x) v = 40.0f + 3.0f * v;
    quant_kernels_for(Isa::scalar).quantize(L, x.data(), d, 0, n, blk.data());
    const std::vector<double> xh = test::block_x_hat(L, blk.data());
    // Softmax of scores spread over ~12 nats, per query.
    const std::vector<float> sc = gaussian((size_t)nq * n, 11);
    std::vector<float> w((size_t)nq * n);
    for (int j = 0; j < nq; ++j) {
      double z = 0;
      for (int i = 0; i < n; ++i) z += std::exp(3.0 * sc[(size_t)j * n + i]);
      for (int i = 0; i < n; ++i) w[(size_t)j * n + i] = (float)(std::exp(3.0 * sc[(size_t)j * n + i]) / z);
    }
    std::vector<double> ref((size_t)nq * d, 0.0);
    for (int j = 0; j < nq; ++j)
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < d; ++c) ref[(size_t)j * d + c] += (double)w[(size_t)j * n + i] * xh[(size_t)i * d + c];
    const PackedBlockView view{&L, blk.data(), nullptr};
    for (Isa isa : variants()) {
      std::vector<float> acc((size_t)nq * d, 0.0f);
      paged_attention_kernels_for(isa).packed_accumulate(view, w.data(), n, nq, 0, n, acc.data(), d);
      for (int j = 0; j < nq; ++j) {
        double top = 0, err = 0;
        for (int c = 0; c < d; ++c) {
          top = std::max(top, std::abs(ref[(size_t)j * d + c]));
          err = std::max(err, std::abs(acc[(size_t)j * d + c] - ref[(size_t)j * d + c]));
        }
        ASSERT_LE(err, kSoftmaxAccumulateRel * top) << isa_name(isa) << " group " << L.group << " query " << j;
      }
    }
  }
}

TEST(PagedAttentionKernels, Avx512VariantRunsOrSkips) {
  if (best_isa() < Isa::avx512) GTEST_SKIP() << "this CPU has no AVX-512; its kernels are covered where available";
  EXPECT_EQ(paged_attention_kernels_for(Isa::avx512).isa, Isa::avx512);
}

}  // namespace
}  // namespace mpkv

// Every SIMD variant of the KV block kernels against the scalar _ref, on every bit-width and
// several (head_dim, group) shapes, plus the layouts the SIMD tables forward to _ref.
// AVX-512 cases skip (with the reason) on CPUs without it; run the binary with MPKV_ISA=scalar
// and MPKV_ISA=avx2 as well to cover the dispatch paths of the quantizer class.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "quant/kv_block_layout.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_kernels.h"
#include "util/cpu_features.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

// dequantize: SIMD computes code * S + Z with one FMA rounding, _ref with two roundings.
constexpr double kDequantRel = 2 * FLT_EPSILON;
// dot: fp32 sums of head_dim products in a different order (and S, Z factored out of each group)
// against _ref's double sum: the error is at most (summation depth) * eps * sum |q_c| |x_hat terms|;
// the depth is below head_dim / 8 + 16 for every layout here.
double dot_tolerance(const KvBlockLayout& L, double abs_terms) { return (L.head_dim / 8 + 16) * FLT_EPSILON * abs_terms; }
// accumulate: per token a few fp32 roundings of |out| and |w| (|code S| + |Z|) (FMA vs mul + add).
constexpr double kAccumulateRelPerToken = 4 * FLT_EPSILON;

struct Shape {
  Codec codec;
  GroupAxis axis;
  int head_dim, group, tokens;
};

std::vector<Shape> shapes() {
  return {
      {Codec::uniform, GroupAxis::token, 64, 64, 37},   {Codec::uniform, GroupAxis::token, 64, 32, 37},
      {Codec::uniform, GroupAxis::token, 128, 16, 9},   {Codec::uniform, GroupAxis::token, 128, 128, 9},
      {Codec::uniform, GroupAxis::token, 64, 8, 13},    {Codec::uniform, GroupAxis::token, 24, 8, 21},
      {Codec::uniform, GroupAxis::channel, 64, 8, 32},  // KIVI keys (forwarded to _ref)
      {Codec::lloyd_max, GroupAxis::token, 64, 64, 11},  // turbo codes (forwarded to _ref)
  };
}

std::vector<int> bits_of(Codec c) {
  return c == Codec::lloyd_max ? std::vector<int>{1, 2, 3, 4} : std::vector<int>{1, 2, 3, 4, 8, 16};
}

std::string describe(const KvBlockLayout& L) {
  return std::string(L.codec == Codec::uniform ? "uniform" : "lloyd_max") +
         (L.axis == GroupAxis::token ? " token" : " channel") + " bits=" + std::to_string(L.bits) +
         " d=" + std::to_string(L.head_dim) + " G=" + std::to_string(L.group) + " P=" + std::to_string(L.tokens);
}

// Rows with different offsets and spreads per token, a few outlier channels, one constant group
// and signed zeros: [tokens, ld] with ld > head_dim (the stride must be honoured).
std::vector<float> make_rows(int tokens, int d, size_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x((size_t)tokens * ld, NAN);  // padding stays NaN: reading it would show
  for (int t = 0; t < tokens; ++t) {
    const float spread = std::exp(nd(rng)), offset = nd(rng);
    for (int c = 0; c < d; ++c) x[(size_t)t * ld + c] = offset + spread * nd(rng) * (c % 13 == 5 ? 20.0f : 1.0f);
  }
  for (int c = 0; c < 8 && c < d; ++c) x[(size_t)1 * ld + c] = 2.5f;  // a constant group when G == 8
  x[0] = -0.0f;
  x[1] = 0.0f;
  return x;
}

double abs_xhat(const KvBlockLayout& L, const uint8_t* b, const std::vector<float>& ref_row, int t, int c) {
  // |code * S| + |Z| for uniform, |x_hat| for Lloyd-Max (one product, no cancellation)
  if (L.codec == Codec::lloyd_max) return std::fabs(ref_row[(size_t)c]);
  const size_t pi = L.param_index(t, c);
  const double s = fp16_to_fp32(load_half(b, L.scales_offset, pi)) * (double)L.scale_mult;
  const double z = fp16_to_fp32(load_half(b, L.zeros_offset, pi));
  return get_code(L, b, t, c) * s + std::fabs(z);
}

class QuantKernelVariants : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if ((int)best_isa() < (int)GetParam()) {
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam()) << " (best: " << isa_name(best_isa()) << ")";
    }
  }
  const QuantKernels& k() const { return quant_kernels_for(GetParam()); }
  const QuantKernels& ref() const { return quant_kernels_for(Isa::scalar); }
};

TEST_P(QuantKernelVariants, QuantizeIsBitIdenticalToRef) {
  for (const Shape& s : shapes()) {
    for (int bits : bits_of(s.codec)) {
      const KvBlockLayout L = make_kv_block_layout(s.codec, s.axis, bits, s.head_dim, s.tokens, s.group);
      const size_t ld = (size_t)s.head_dim + 5;
      const std::vector<float> x = make_rows(s.tokens, s.head_dim, ld, 100u + (uint32_t)bits);
      std::vector<uint8_t> a(L.bytes, 0x11), b(L.bytes, 0x11);
      ref().quantize(L, x.data(), ld, 0, s.tokens, a.data());
      k().quantize(L, x.data(), ld, 0, s.tokens, b.data());
      ASSERT_EQ(a, b) << describe(L);
      // a sub-range in the middle: only those tokens change
      const int t0 = s.axis == GroupAxis::channel ? s.group : 2;
      const int n = s.axis == GroupAxis::channel ? s.group : s.tokens - 4;
      const std::vector<float> y = make_rows(n, s.head_dim, ld, 7u + (uint32_t)bits);
      ref().quantize(L, y.data(), ld, t0, n, a.data());
      k().quantize(L, y.data(), ld, t0, n, b.data());
      ASSERT_EQ(a, b) << describe(L) << " range";
    }
  }
}

// Reading runs twice for uniform codes: as quantized (scale_mult 1) and as if the block had been
// shrunk from 16 bits to 2 (scale_mult 21845, kv_block_layout.h): every scale read must apply it.
std::vector<float> scale_mults_of(Codec c) {
  return c == Codec::uniform ? std::vector<float>{1.0f, 21845.0f} : std::vector<float>{1.0f};
}

TEST_P(QuantKernelVariants, DequantizeDotAccumulateMatchRef) {
  for (const Shape& s : shapes()) {
    for (int bits : bits_of(s.codec)) {
      for (float mult : scale_mults_of(s.codec)) {
        KvBlockLayout L = make_kv_block_layout(s.codec, s.axis, bits, s.head_dim, s.tokens, s.group);
        const int d = s.head_dim, P = s.tokens;
        const std::vector<float> x = make_rows(P, d, (size_t)d, 300u + (uint32_t)bits);
        std::vector<uint8_t> blk(L.bytes);
        ref().quantize(L, x.data(), (size_t)d, 0, P, blk.data());
        L.scale_mult = mult;
        if (mult != 1.0f) {  // the reference itself applies it: x_hat = code * (S * mult) + Z
          std::vector<float> y((size_t)d);
          ref().dequantize(L, blk.data(), 0, 1, y.data(), (size_t)d);
          const size_t pi = L.param_index(0, 3);
          const float S = fp16_to_fp32(load_half(blk.data(), L.scales_offset, pi)) * mult;
          const float Z = fp16_to_fp32(load_half(blk.data(), L.zeros_offset, pi));
          const double want = get_code(L, blk.data(), 0, 3) * (double)S + Z;
          ASSERT_NEAR(y[3], want, kDequantRel * std::fabs(want) + 1e-6) << describe(L);
        }

        // dequantize into a strided output, tokens [1, P)
        const size_t ldy = (size_t)d + 3;
        std::vector<float> ya((size_t)P * ldy, -7.0f), yb((size_t)P * ldy, -7.0f);
        ref().dequantize(L, blk.data(), 1, P - 1, ya.data(), ldy);
        k().dequantize(L, blk.data(), 1, P - 1, yb.data(), ldy);
        for (int i = 0; i < P - 1; ++i) {
          for (int c = 0; c < d; ++c) {
            const std::vector<float> row(ya.begin() + (long)(i * ldy), ya.begin() + (long)(i * ldy + d));
            ASSERT_NEAR(yb[i * ldy + c], ya[i * ldy + c], kDequantRel * abs_xhat(L, blk.data(), row, 1 + i, c))
                << describe(L) << " t=" << 1 + i << " c=" << c;
          }
          for (size_t c = (size_t)d; c < ldy; ++c) ASSERT_EQ(yb[i * ldy + c], -7.0f) << "wrote past the row";
        }

        // dot against a query, every token; and accumulate with weights into a non-zero output
        std::mt19937 rng(9u + (uint32_t)bits);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> q((size_t)d), w((size_t)P), oa((size_t)d), ob((size_t)d);
        for (float& v : q) v = nd(rng);
        for (float& v : w) v = std::fabs(nd(rng)) / P;
        for (size_t c = 0; c < oa.size(); ++c) oa[c] = ob[c] = nd(rng);
        const std::vector<float> out0 = oa;
        std::vector<float> da((size_t)P), db((size_t)P), full((size_t)P * d);
        ref().dot(L, blk.data(), q.data(), 0, P, da.data());
        k().dot(L, blk.data(), q.data(), 0, P, db.data());
        ref().dequantize(L, blk.data(), 0, P, full.data(), (size_t)d);
        for (int t = 0; t < P; ++t) {
          const std::vector<float> row(full.begin() + (long)t * d, full.begin() + (long)(t + 1) * d);
          double terms = 0;
          for (int c = 0; c < d; ++c) terms += std::fabs(q[(size_t)c]) * abs_xhat(L, blk.data(), row, t, c);
          ASSERT_NEAR(db[(size_t)t], da[(size_t)t], dot_tolerance(L, terms)) << describe(L) << " t=" << t;
        }
        ref().accumulate(L, blk.data(), w.data(), 0, P, oa.data());
        k().accumulate(L, blk.data(), w.data(), 0, P, ob.data());
        for (int c = 0; c < d; ++c) {
          double mag = std::fabs(out0[(size_t)c]);
          for (int t = 0; t < P; ++t) {
            const std::vector<float> row(full.begin() + (long)t * d, full.begin() + (long)(t + 1) * d);
            mag += w[(size_t)t] * abs_xhat(L, blk.data(), row, t, c);
          }
          ASSERT_NEAR(ob[(size_t)c], oa[(size_t)c], kAccumulateRelPerToken * (P + 2) * mag)
              << describe(L) << " c=" << c;
        }
      }
    }
  }
}

TEST_P(QuantKernelVariants, ShrinkIsBitIdenticalToRef) {
  for (const Shape& s : shapes()) {
    if (s.codec != Codec::uniform) continue;
    for (int bits : {16, 8, 4, 2}) {
      const KvBlockLayout L = make_kv_block_layout(s.codec, s.axis, bits, s.head_dim, s.tokens, s.group);
      const KvBlockLayout H = halved_layout(L);
      const std::vector<float> x = make_rows(s.tokens, s.head_dim, (size_t)s.head_dim, 500u + (uint32_t)bits);
      std::vector<uint8_t> blk(L.bytes), a(H.bytes, 0x5A), b(H.bytes, 0xA5);
      ref().quantize(L, x.data(), (size_t)s.head_dim, 0, s.tokens, blk.data());
      ref().shrink(L, blk.data(), H, a.data());
      k().shrink(L, blk.data(), H, b.data());
      ASSERT_EQ(a, b) << describe(L);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, QuantKernelVariants, ::testing::Values(Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

TEST(QuantKernels, TableFollowsActiveIsa) {
  EXPECT_EQ(quant_kernels().isa, active_isa());
  EXPECT_EQ(quant_kernels_for(Isa::scalar).quantize, &quantize_ref);
  if ((int)best_isa() < (int)Isa::avx512) {
    EXPECT_THROW(quant_kernels_for(Isa::avx512), Error);
  }
}

}  // namespace
}  // namespace mpkv

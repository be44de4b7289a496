// The four quantizers through KvQuantizer: hand-checked codes, error bounds from the definition,
// the transforms (Hadamard against the explicit Sylvester matrix, q.k invariance) and the
// behaviour each method exists for (KIVI on channel outliers, rotation on outliers, turbo's MSE).
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "quant/hadamard.h"
#include "quant/kv_quantizer.h"
#include "quant/lloyd_max.h"
#include "quant/uniform_params.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

std::vector<float> gaussian_rows(int n, int d, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> x((size_t)n * d);
  for (float& v : x) v = nd(rng);
  return x;
}

double mse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  return s / (double)a.size();
}

TEST(UniformQuantizer, HandExampleRoundsHalfUp) {
  // One group of 8 at 3 bits with min 0, max 7: Z = 0, S = 1 exactly (fp16-representable), so
  // codes are floor(x + 1/2): 2.5 -> 3 and 0.5 -> 1 (half up, not to even), 3.49 -> 3, 6.5 -> 7.
  KvQuantizer q({QuantMethod::uniform, KvRole::key, 3, 8, 0});
  const KvBlockLayout L = q.block_layout(1);
  const std::vector<float> x = {0.0f, 7.0f, 2.5f, 1.5f, 0.5f, 3.49f, 6.5f, 4.0f};
  std::vector<uint8_t> b(L.bytes);
  q.quantize(L, x.data(), 8, 0, 1, b.data());
  const uint32_t want[8] = {0, 7, 3, 2, 1, 3, 7, 4};
  for (int c = 0; c < 8; ++c) EXPECT_EQ(get_code(L, b.data(), 0, c), want[c]) << c;
  EXPECT_EQ(load_half(b.data(), L.scales_offset, 0), fp32_to_fp16(1.0f));
  EXPECT_EQ(load_half(b.data(), L.zeros_offset, 0), fp32_to_fp16(0.0f));
  std::vector<float> y(8);
  q.dequantize(L, b.data(), 0, 1, y.data(), 8);
  for (int c = 0; c < 8; ++c) EXPECT_EQ(y[(size_t)c], (float)want[c]);
}

TEST(UniformQuantizer, FpSixteenParamsRoundOutwards) {
  // Z is rounded down and S up, so the grid still reaches max: 0.1 and 0.3 are not fp16 values.
  const UniformGroupParams p = uniform_group_params(0.1f, 0.3f, 4);
  EXPECT_LE(p.zero, 0.1f);
  EXPECT_GE(p.zero + 15 * p.scale, 0.3f);
  EXPECT_EQ(fp16_round_down(-1e-9f), 0x8001);  // toward -inf: the negative subnormal
  EXPECT_EQ(fp16_round_up(1e-9f), 0x0001);
  EXPECT_EQ(fp16_round_up(1.0f), fp32_to_fp16(1.0f));
  // constant group: S clamped to the smallest fp16, finite, x recovered
  const UniformGroupParams c = uniform_group_params(3.7f, 3.7f, 8);
  EXPECT_GT(c.scale, 0.0f);
  EXPECT_TRUE(std::isfinite(1.0f / c.scale));
}

// |x - x_hat| <= S / 2 for every element (grid covers [min, max]; S is the stored scale), plus the
// fp32 rounding of code * S + Z.
TEST(UniformQuantizer, ErrorWithinHalfAStepAtEveryWidth) {
  const int d = 64, n = 40;
  std::vector<float> x = gaussian_rows(n, d, 3, 2.0f);
  for (int c = 0; c < d; ++c) x[(size_t)5 * d + c] = 1.25f;  // a constant row
  for (int bits : {1, 2, 3, 4, 8, 16}) {
    for (int G : {8, 32, 64}) {
      KvQuantizer q({QuantMethod::uniform, KvRole::value, bits, d, G});
      const KvBlockLayout L = q.block_layout(n);
      std::vector<uint8_t> b(L.bytes);
      q.quantize(L, x.data(), d, 0, n, b.data());
      std::vector<float> y((size_t)n * d);
      q.dequantize(L, b.data(), 0, n, y.data(), d);
      for (int t = 0; t < n; ++t) {
        for (int c = 0; c < d; ++c) {
          const size_t pi = L.param_index(t, c);
          const float s = fp16_to_fp32(load_half(b.data(), L.scales_offset, pi));
          const float z = fp16_to_fp32(load_half(b.data(), L.zeros_offset, pi));
          const double err = std::fabs((double)x[(size_t)t * d + c] - y[(size_t)t * d + c]);
          ASSERT_LE(err, 0.5 * s + 2 * FLT_EPSILON * (std::fabs(y[(size_t)t * d + c]) + std::fabs(z)))
              << "bits=" << bits << " G=" << G << " t=" << t << " c=" << c;
          // and the scale is the min-max one up to fp16 rounding (never wastefully large)
          float lo = x[(size_t)t * d + c / G * G], hi = lo;
          for (int k = c / G * G; k < (c / G + 1) * G; ++k) lo = std::min(lo, x[(size_t)t * d + k]), hi = std::max(hi, x[(size_t)t * d + k]);
          ASSERT_LE(s, (hi - lo) / ((1 << bits) - 1) * (1 + 1.0 / 256) + kMinScale * 2) << bits;
        }
      }
    }
  }
}

TEST(UniformQuantizer, SaturatesBeyondFp16RangeWithoutNan) {
  // Inputs beyond fp16's +-65504 are clamped there (documented): the result is finite and within
  // half a step of the clamped value; the ordinary values keep the half-step bound.
  KvQuantizer q({QuantMethod::uniform, KvRole::key, 4, 8, 0});
  const KvBlockLayout L = q.block_layout(1);
  const std::vector<float> x = {1e6f, -1e6f, 0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  std::vector<uint8_t> b(L.bytes);
  q.quantize(L, x.data(), 8, 0, 1, b.data());
  std::vector<float> y(8);
  q.dequantize(L, b.data(), 0, 1, y.data(), 8);
  const float s = fp16_to_fp32(load_half(b.data(), L.scales_offset, 0));
  EXPECT_TRUE(std::isfinite(s));
  for (int c = 0; c < 8; ++c) {
    EXPECT_TRUE(std::isfinite(y[(size_t)c]));
    EXPECT_LE(std::fabs(y[(size_t)c] - std::clamp(x[(size_t)c], -kFp16Max, kFp16Max)), 0.5f * s) << c;
  }
}

TEST(KiviQuantizer, KeysArePerChannelOverTokenGroups) {
  const int d = 16, G = 8, n = 16;
  std::vector<float> x = gaussian_rows(n, d, 11);
  KvQuantizer q({QuantMethod::kivi, KvRole::key, 2, d, G});
  EXPECT_EQ(q.axis(), GroupAxis::channel);
  EXPECT_EQ(q.token_granularity(), G);
  const KvBlockLayout L = q.block_layout(n);
  std::vector<uint8_t> b(L.bytes);
  q.quantize(L, x.data(), d, 0, n, b.data());
  for (int tg = 0; tg < n / G; ++tg) {
    for (int c = 0; c < d; ++c) {
      float lo = x[(size_t)tg * G * d + c];
      for (int t = tg * G; t < (tg + 1) * G; ++t) lo = std::min(lo, x[(size_t)t * d + c]);
      EXPECT_EQ(load_half(b.data(), L.zeros_offset, L.param_index(tg * G, c)), fp16_round_down(lo));
    }
  }
  // values stay per-token
  EXPECT_EQ(KvQuantizer({QuantMethod::kivi, KvRole::value, 2, d, 0}).axis(), GroupAxis::token);
  // partial groups are refused
  std::vector<float> y((size_t)(n - 1) * d);
  EXPECT_THROW(q.quantize_dequantize(x.data(), n - 1, y.data()), Error);
}

// The reason KIVI quantizes keys per channel: keys have outlier channels (large, roughly constant
// per channel). Per-token min-max spends its range on the outlier; per-channel does not.
TEST(KiviQuantizer, BeatsPerTokenOnOutlierChannels) {
  const int d = 64, n = 128;
  std::vector<float> x = gaussian_rows(n, d, 12);
  for (int t = 0; t < n; ++t) x[(size_t)t * d + 7] = 40.0f + x[(size_t)t * d + 7], x[(size_t)t * d + 30] -= 25.0f;
  std::vector<float> a(x.size()), b(x.size());
  KvQuantizer({QuantMethod::uniform, KvRole::key, 2, d, 0}).quantize_dequantize(x.data(), n, a.data());
  KvQuantizer({QuantMethod::kivi, KvRole::key, 2, d, 32}).quantize_dequantize(x.data(), n, b.data());
  EXPECT_LT(mse(x, b), 0.2 * mse(x, a));
}

TEST(Hadamard, MatchesSylvesterMatrixAndIsItsOwnInverse) {
  for (int d : {1, 2, 8, 64, 256}) {
    const std::vector<float> x = gaussian_rows(1, d, (uint32_t)d);
    std::vector<float> y = x;
    fwht_orthonormal(y.data(), d);
    for (int i = 0; i < d; ++i) {
      double want = 0;
      for (int j = 0; j < d; ++j) want += ((std::popcount((unsigned)(i & j)) & 1) ? -1.0 : 1.0) * x[(size_t)j];
      want /= std::sqrt((double)d);
      ASSERT_NEAR(y[(size_t)i], want, 1e-5 * std::sqrt((double)d)) << d << " " << i;
    }
    fwht_orthonormal(y.data(), d);
    for (int i = 0; i < d; ++i) ASSERT_NEAR(y[(size_t)i], x[(size_t)i], 1e-5) << d;
  }
  float v[12] = {};
  EXPECT_THROW(fwht_orthonormal(v, 12), Error);
}

// Attention in code space equals attention in model space: q . k_hat computed as
// dot(T q, codes) equals q . dequantize(k) (both read the same codes), and
// from_code_space(sum w v_hat') equals sum w dequantize(v).
TEST(RotatedAndTurbo, AttentionUnchangedByTheTransform) {
  const int d = 64, n = 12;
  for (QuantMethod m : {QuantMethod::rotated, QuantMethod::turbo}) {
    KvQuantizer q({m, KvRole::key, 4, d, 0});
    const std::vector<float> k = gaussian_rows(n, d, 21), qv = gaussian_rows(1, d, 22);
    const KvBlockLayout L = q.block_layout(n);
    std::vector<uint8_t> b(L.bytes);
    q.quantize(L, k.data(), d, 0, n, b.data());
    std::vector<float> khat((size_t)n * d);
    q.dequantize(L, b.data(), 0, n, khat.data(), d);
    std::vector<float> qc = qv;
    q.to_code_space(qc.data());
    std::vector<float> scores((size_t)n);
    q.kernels().dot(L, b.data(), qc.data(), 0, n, scores.data());
    std::vector<float> w((size_t)n), out((size_t)d, 0.0f);
    for (int t = 0; t < n; ++t) w[(size_t)t] = 1.0f / (t + 1);
    q.kernels().accumulate(L, b.data(), w.data(), 0, n, out.data());
    q.from_code_space(out.data());
    for (int t = 0; t < n; ++t) {
      double want = 0, mag = 0;
      for (int c = 0; c < d; ++c) want += (double)qv[(size_t)c] * khat[(size_t)t * d + c], mag += std::fabs(qv[(size_t)c] * khat[(size_t)t * d + c]);
      EXPECT_NEAR(scores[(size_t)t], want, 1e-5 * mag + 1e-6) << method_name(m) << " t=" << t;
    }
    for (int c = 0; c < d; ++c) {
      double want = 0;
      for (int t = 0; t < n; ++t) want += w[(size_t)t] * khat[(size_t)t * d + c];
      EXPECT_NEAR(out[(size_t)c], want, 1e-5) << method_name(m) << " c=" << c;
    }
    // and exactly (up to fp32) q . k == (T q) . (T k) before quantization
    std::vector<float> kc(k.begin(), k.begin() + d);
    q.to_code_space(kc.data());
    double a = 0, bb = 0;
    for (int c = 0; c < d; ++c) a += (double)qv[(size_t)c] * k[(size_t)c], bb += (double)qc[(size_t)c] * kc[(size_t)c];
    EXPECT_NEAR(a, bb, 1e-4);
  }
}

// What rotation is for: a row with one large outlier channel. Per-token min-max at 4 bits spends
// the range on the outlier; after the Hadamard transform the energy is spread over all channels.
TEST(RotatedQuantizer, ReducesErrorOnOutlierRows) {
  const int d = 128, n = 64;
  std::vector<float> x = gaussian_rows(n, d, 31);
  for (int t = 0; t < n; ++t) x[(size_t)t * d + (t * 7) % d] = 60.0f;
  std::vector<float> a(x.size()), b(x.size());
  KvQuantizer({QuantMethod::uniform, KvRole::key, 4, d, 0}).quantize_dequantize(x.data(), n, a.data());
  KvQuantizer({QuantMethod::rotated, KvRole::key, 4, d, 0}).quantize_dequantize(x.data(), n, b.data());
  EXPECT_LT(mse(x, b), 0.5 * mse(x, a));
}

// Turbo on Gaussian vectors: the normalized error E||x - x_hat||^2 / ||x||^2 is the Lloyd-Max MSE
// of N(0, 1/d) per coordinate times d / d = the unit-Gaussian codebook MSE. The rotated
// coordinates are Beta-distributed, close to N(0, 1/d) at d = 128: allow 5%, plus sampling noise
// (2048 vectors x 128 coordinates) and fp16 rounding of the norm (2^-11).
TEST(TurboQuantizer, NormalizedMseIsTheCodebookMse) {
  constexpr double kRelTol = 0.05;
  const int d = 128, n = 2048;
  const std::vector<float> x = gaussian_rows(n, d, 41, 3.0f);
  for (int bits = 1; bits <= 4; ++bits) {
    KvQuantizer q({QuantMethod::turbo, KvRole::key, bits, d, 0});
    std::vector<float> y(x.size());
    q.quantize_dequantize(x.data(), n, y.data());
    double rel = 0;
    for (int t = 0; t < n; ++t) {
      double e = 0, s = 0;
      for (int c = 0; c < d; ++c) {
        const double v = x[(size_t)t * d + c];
        e += (v - y[(size_t)t * d + c]) * (v - y[(size_t)t * d + c]);
        s += v * v;
      }
      rel += e / s;
    }
    rel /= n;
    const double want = lloyd_max_gaussian(bits).mse;
    EXPECT_NEAR(rel, want, kRelTol * want) << bits << " bits: " << rel << " vs " << want;
    std::printf("turbo %d bits: normalized MSE %.5f, codebook %.5f\n", bits, rel, want);
  }
  // the zero vector stays zero
  std::vector<float> z((size_t)d, 0.0f), zo((size_t)d, 1.0f);
  KvQuantizer({QuantMethod::turbo, KvRole::key, 2, d, 0}).quantize_dequantize(z.data(), 1, zo.data());
  for (float v : zo) EXPECT_EQ(v, 0.0f);
}

TEST(TurboQuantizer, TransformRoundTripsAndDependsOnSeed) {
  const int d = 64;
  KvQuantizer a({QuantMethod::turbo, KvRole::value, 3, d, 0, 1}), b({QuantMethod::turbo, KvRole::value, 3, d, 0, 2});
  const std::vector<float> x = gaussian_rows(1, d, 5);
  std::vector<float> ya = x, yb = x;
  a.to_code_space(ya.data());
  b.to_code_space(yb.data());
  EXPECT_GT(mse(ya, yb), 0.1);  // different signs, different rotations
  a.from_code_space(ya.data());
  for (int c = 0; c < d; ++c) EXPECT_NEAR(ya[(size_t)c], x[(size_t)c], 1e-5);
}

TEST(KvQuantizer, QuantizeIntoARangeLeavesOtherTokensAlone) {
  const int d = 64, P = 8;
  for (QuantMethod m : {QuantMethod::uniform, QuantMethod::rotated, QuantMethod::turbo}) {
    KvQuantizer q({m, KvRole::key, 3, d, 0});
    const KvBlockLayout L = q.block_layout(P);
    const std::vector<float> x = gaussian_rows(P, d, 51), y = gaussian_rows(2, d, 52);
    std::vector<uint8_t> b(L.bytes);
    q.quantize(L, x.data(), d, 0, P, b.data());
    std::vector<float> before((size_t)P * d), after((size_t)P * d);
    q.dequantize(L, b.data(), 0, P, before.data(), d);
    q.quantize(L, y.data(), d, 3, 2, b.data());
    q.dequantize(L, b.data(), 0, P, after.data(), d);
    for (int t = 0; t < P; ++t) {
      const bool changed = t == 3 || t == 4;
      double diff = 0;
      for (int c = 0; c < d; ++c) diff += std::fabs(before[(size_t)t * d + c] - after[(size_t)t * d + c]);
      if (changed) EXPECT_GT(diff, 0.0) << method_name(m) << " t=" << t;
      else EXPECT_EQ(diff, 0.0) << method_name(m) << " t=" << t;
    }
    // a layout for other options is refused
    const KvBlockLayout other = make_kv_block_layout(L.codec, L.axis, L.bits == 3 ? 2 : 3, d, P, L.group);
    EXPECT_THROW(q.quantize(other, x.data(), d, 0, 1, b.data()), Error);
  }
}

}  // namespace
}  // namespace mpkv

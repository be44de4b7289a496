// The SiLU gate (src/model/activation_kernels.h) at every tier this CPU runs: bit for bit the
// scalar _ref (the tiers compute one fixed fp32 chain, so greedy output cannot depend on the tier
// through it), at every length (SIMD bodies and tails), and the _ref against g / (1 + exp(-g))
// evaluated here in long double (not by the code under test).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/activation_kernels.h"
#include "test_isa_tiers.h"

namespace mpkv {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Gates: every 2011th float bit pattern of both signs up to 2^7 in magnitude (~1.1M values: all
// exponents, the clamp bounds +-87 / 88 inside), then +-0, +-inf, NaN, subnormals, huge values.
std::vector<float> gate_sweep() {
  std::vector<float> g;
  for (uint32_t b = 0; b <= bits_of(128.0f); b += 2011) g.push_back(from_bits(b)), g.push_back(-from_bits(b));
  const float inf = std::numeric_limits<float>::infinity();
  for (float s : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-40f, -1e-40f, 3e38f, -3e38f,
                  87.0f, -87.0f, 88.0f, -88.0f, 86.99f, -86.99f, 0.34657359f, -0.34657359f})
    g.push_back(s);
  return g;
}

TEST(ActivationKernels, EveryTierIsTheRefBitForBit) {
  const std::vector<float> gates = gate_sweep();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
  std::vector<float> up(gates.size());
  for (float& u : up) u = ud(rng);
  up[0] = 1.0f;
  std::vector<float> want = gates;
  silu_mul_ref(want.data(), up.data(), (int64_t)want.size());
  for (Isa isa : test::runnable_isas()) {
    const ActivationKernels& k = activation_kernels_for(isa);
    // Whole sweep, then short lengths at every offset mod 16 (the tails of both SIMD widths).
    std::vector<float> got = gates;
    k.silu_mul(got.data(), up.data(), (int64_t)got.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << isa_name(isa) << " gate " << gates[i] << " up " << up[i];
    for (int n = 0; n <= 40; ++n)
      for (int off = 0; off < 16; ++off) {
        std::vector<float> part(gates.begin() + 1000 * n + off, gates.begin() + 1000 * n + off + n);
        k.silu_mul(part.data(), up.data() + 1000 * n + off, n);
        for (int i = 0; i < n; ++i)
          ASSERT_EQ(bits_of(part[i]), bits_of(want[1000 * n + off + i])) << isa_name(isa) << " n " << n << " off " << off;
      }
  }
}

TEST(ActivationKernels, RefIsSiluWithinTwoUlp) {
  const std::vector<float> gates = gate_sweep();
  std::vector<float> out = gates;
  const std::vector<float> ones(gates.size(), 1.0f);
  silu_mul_ref(out.data(), ones.data(), (int64_t)out.size());
  double worst = 0.0;
  for (size_t i = 0; i < gates.size(); ++i) {
    const float g = gates[i], y = out[i];
    if (std::isnan(g)) {
      ASSERT_TRUE(std::isnan(y)) << g;
    } else if (std::isinf(g)) {
      ASSERT_EQ(y, g);
    } else if (g >= 87.0f) {
      ASSERT_EQ(y, g);  // 1 + e(-87) rounds to 1
    } else if (g < -87.0f) {
      ASSERT_LE(std::fabs(y), std::fabs(g) * 2e-38f) << g;  // e clamped at 88: a value below 1e-33
      ASSERT_TRUE(std::signbit(y)) << g;
    } else if (g == 0.0f) {
      ASSERT_EQ(bits_of(y), bits_of(g));
    } else {
      const long double want = (long double)g / (1.0L + std::exp(-(long double)g));
      if (std::fabs(want) < 1e-37L) continue;  // subnormal results: absolute error only
      const double ulps = (double)(std::fabs((long double)y - want) / std::fabs(want)) / 5.96e-8;  // 2^-24 relative
      worst = std::max(worst, ulps);
      ASSERT_LE(ulps, 4.0) << "gate " << g << " out " << y;  // units of 2^-24 relative: 4 = 2 ulp
    }
  }
  std::printf("worst error %.2f half-ulps (2^-24 relative)\n", worst);
}

}  // namespace
}  // namespace mpkv

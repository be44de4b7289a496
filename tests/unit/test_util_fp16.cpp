// fp16/bf16 scalar conversions: exhaustive over every half value, and against the F16C
// instructions (round-to-nearest-even) over a dense sweep of float bit patterns.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>

#include "util/cpu_features.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

__attribute__((target("f16c"))) uint16_t hw_to_half(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
__attribute__((target("f16c"))) float hw_from_half(uint16_t h) { return _cvtsh_ss(h); }

TEST(Fp16, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32((uint16_t)h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    EXPECT_EQ(fp32_to_fp16(f), h) << "half " << h;
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);             // rounds up to infinity
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even -> 0
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(1.00390625f), 0x3F80);  // halfway 1 + 2^-8: ties to even
}

TEST(Fp16, MatchesF16cOnDenseSweep) {
  if (!cpu_features().f16c) GTEST_SKIP() << "CPU lacks F16C";
  // Every 97th float bit pattern (~44 million values), covering all exponents, both signs.
  for (uint64_t b = 0; b < (1ull << 32); b += 97) {
    const float f = fp32_from_bits((uint32_t)b);
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), hw_to_half(f)) << "bits 0x" << std::hex << b;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_to_fp32((uint16_t)h), b = hw_from_half((uint16_t)h);
    if (std::isnan(a)) { EXPECT_TRUE(std::isnan(b)); continue; }
    EXPECT_EQ(fp32_to_bits(a), fp32_to_bits(b));
  }
}

TEST(CpuFeatures, ParseIsa) {
  EXPECT_EQ(parse_isa("scalar"), Isa::scalar);
  EXPECT_EQ(parse_isa("avx2"), Isa::avx2);
  EXPECT_EQ(parse_isa("avx512"), Isa::avx512);
  EXPECT_THROW(parse_isa("sse9"), Error);
  EXPECT_LE((int)active_isa(), (int)best_isa());
}

}  // namespace
}  // namespace mpkv

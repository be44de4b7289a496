// PM-KVQ's equivalent right shift, proved over every code value of every step (docs/algorithms.md §2).
//
// The code mapping is checked as integer identities, independently of the formula's form:
//   requantize:  X_b == round_half_up(X_2b / (2^b+1)) == floor((2 X_2b + 2^b + 1) / (2 (2^b+1)))
//   paper D.1:   for every real x with round_half_up(x) == X_2b, round_half_up(x / (2^b+1)) == X_b
// Scales are exact (kv_block_layout.h, scale_mult): a shrunk block keeps its 16-bit fp16 scale
// and its layout carries prod(2^b + 1), so after every shrink the dequantized values are those of
// the 16-bit codes requantized straight to that width, to the last bit of fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/equivalent_shift.h"
#include "quant/kv_block_layout.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_kernels.h"
#include "util/cpu_features.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

// floor(num / den) for num >= 0, den > 0.
uint64_t floor_div(uint64_t num, uint64_t den) { return num / den; }

// round half up of X / m, with integers only.
uint64_t round_half_up_ratio(uint64_t x, uint64_t m) { return floor_div(2 * x + m, 2 * m); }

const int kHalvings[] = {8, 4, 2, 1};  // b of 2b -> b

TEST(EquivalentShift, EveryCodeEqualsRequantizeRoundHalfUp) {
  for (int b : kHalvings) {
    const uint64_t m = (1ull << b) + 1;
    for (uint32_t x = 0; x < (1u << (2 * b)); ++x) {
      const uint32_t got = equivalent_shift_code(x, b);
      ASSERT_EQ(got, round_half_up_ratio(x, m)) << "2b=" << 2 * b << " X=" << x;
      ASSERT_LT(got, 1u << b);
    }
    // The ends: 0 -> 0 and the top code -> the top code (the range is kept, no clamp needed).
    EXPECT_EQ(equivalent_shift_code(0, b), 0u);
    EXPECT_EQ(equivalent_shift_code((1u << (2 * b)) - 1, b), (1u << b) - 1);
  }
}

// Appendix D, Theorem D.1: quantizing the ORIGINAL value straight to b bits with S_b = (2^b+1) S_2b
// gives the shifted code. x = X + j/64 for j in [-32, 31] covers the interval [X - 1/2, X + 1/2)
// that rounds (half up) to X; x / (2^b+1) rounded half up is
// floor((128 X + 2 j + 64 (2^b+1)) / (128 (2^b+1))), all integers.
TEST(EquivalentShift, PaperTheoremForValuesAroundEveryCode) {
  for (int b : kHalvings) {
    const int64_t m = (1ll << b) + 1;
    for (int64_t x = 0; x < (1ll << (2 * b)); ++x) {
      const uint32_t want = equivalent_shift_code((uint32_t)x, b);
      for (int64_t j = -32; j < 32; ++j) {
        const int64_t num = 128 * x + 2 * j + 64 * m;
        ASSERT_GE(num, 0);
        ASSERT_EQ((uint64_t)(num / (128 * m)), want) << "2b=" << 2 * b << " X=" << x << " j=" << j;
      }
    }
  }
}

// 16 -> 8 -> 4 (-> 2 -> 1) equals quantizing the same uint16 codes straight to the final width:
// S_final = S_16 * prod(2^b + 1), i.e. X / 257 / 17 / 5 / 3 rounded half up once.
TEST(EquivalentShift, LadderEqualsDirectRequantization) {
  for (uint32_t x = 0; x < 65536; ++x) {
    const uint32_t x8 = equivalent_shift_code(x, 8);
    const uint32_t x4 = equivalent_shift_code(x8, 4);
    const uint32_t x2 = equivalent_shift_code(x4, 2);
    const uint32_t x1 = equivalent_shift_code(x2, 1);
    ASSERT_EQ(x4, round_half_up_ratio(x, 257 * 17)) << x;    // 4369 = 65535 / 15
    ASSERT_EQ(x2, round_half_up_ratio(x, 257 * 17 * 5)) << x;  // 21845 = 65535 / 3
    ASSERT_EQ(x1, round_half_up_ratio(x, 257 * 17 * 5 * 3)) << x;
  }
  for (uint32_t x = 0; x < 256; ++x) {
    ASSERT_EQ(equivalent_shift_code(equivalent_shift_code(x, 4), 2), round_half_up_ratio(x, 17 * 5)) << x;
  }
}

std::vector<Isa> runnable_variants() {
  std::vector<Isa> v{Isa::scalar};
  if ((int)best_isa() >= (int)Isa::avx2) v.push_back(Isa::avx2);
  if ((int)best_isa() >= (int)Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

// Every code value through the block kernels of every variant (SIMD bodies and scalar tails):
// head_dim 24 and 2731 tokens make 65544 codes, so every step's vector loop leaves a tail.
TEST(EquivalentShift, BlockShrinkOfEveryCodeInEveryVariant) {
  const int d = 24, P = 2731;
  for (int b : kHalvings) {
    const KvBlockLayout src = make_kv_block_layout(Codec::uniform, GroupAxis::token, 2 * b, d, P, 8);
    const KvBlockLayout dst = halved_layout(src);
    ASSERT_EQ(dst.bits, b);
    std::vector<uint8_t> sb(src.bytes, 0);
    const uint32_t n_codes = 1u << (2 * b);
    for (int t = 0; t < P; ++t)
      for (int c = 0; c < d; ++c) set_code(src, sb.data(), t, c, (uint32_t)(t * d + c) % n_codes);
    for (size_t i = 0; i < src.n_params; ++i) {
      store_half(sb.data(), src.scales_offset, i, fp32_to_fp16(0.001f * (float)(i % 97 + 1)));
      store_half(sb.data(), src.zeros_offset, i, fp32_to_fp16(-0.5f + 0.01f * (float)(i % 13)));
    }
    for (Isa isa : runnable_variants()) {
      std::vector<uint8_t> db(dst.bytes, 0xA5);  // garbage: the kernel must overwrite every bit
      shrink_block(src, sb.data(), dst, db.data(), quant_kernels_for(isa));
      for (int t = 0; t < P; ++t) {
        for (int c = 0; c < d; ++c) {
          const uint32_t x = (uint32_t)(t * d + c) % n_codes;
          ASSERT_EQ(get_code(dst, db.data(), t, c), round_half_up_ratio(x, (1u << b) + 1))
              << isa_name(isa) << " 2b=" << 2 * b << " t=" << t << " c=" << c;
        }
      }
      // Scales and zeros are kept as stored; the layout carries the factor exactly.
      ASSERT_EQ(dst.scale_mult, (float)((1 << b) + 1));
      for (size_t i = 0; i < src.n_params; ++i) {
        ASSERT_EQ(load_half(db.data(), dst.scales_offset, i), load_half(sb.data(), src.scales_offset, i));
        ASSERT_EQ(load_half(db.data(), dst.zeros_offset, i), load_half(sb.data(), src.zeros_offset, i));
      }
    }
  }
}

// The exact-ladder claim of docs/numerics.md ("Exact ladder scales"), over every 16-bit code value
// in every kernel variant: after each shrink 16 -> 8 -> 4 -> 2 -> 1 the block (codes, stored
// params, layout) is the block one gets by requantizing the 16-bit codes straight to that width
// (X_b = round_half_up(X_16 / M), M = (2^16 - 1) / (2^b - 1), scale S_16 * M, zero Z_16), built
// here from integers alone; its dequantized values equal that definition bit for bit (the _ref
// dequantizer) and the exact (double) value within fp32 rounding. With the old scheme (scale stored
// as fp16(S * (2^b + 1))) the values were off by up to 2^-11 relative and this test fails.
TEST(EquivalentShift, LadderDequantizesAsDirectRequantizationOfEveryCode) {
  constexpr double kFp32Rel = 2 * 1.1920929e-07;  // S * M rounded, then code * S + Z: two roundings
  const int d = 24, P = 2731;                         // 65544 codes: every uint16 value
  KvBlockLayout L = make_kv_block_layout(Codec::uniform, GroupAxis::token, 16, d, P, 8);
  std::vector<uint8_t> b16(L.bytes, 0);
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < d; ++c) set_code(L, b16.data(), t, c, (uint32_t)(t * d + c) % 65536u);
  for (size_t i = 0; i < L.n_params; ++i) {  // scales from fp16 subnormals (range ~0.004) to ~50
    store_half(b16.data(), L.scales_offset, i, fp32_to_fp16(1e-7f * (float)(1 + (i * 7919) % 10007)));
    store_half(b16.data(), L.zeros_offset, i, fp32_to_fp16(-3.0f + 0.37f * (float)(i % 17)));
  }
  for (Isa isa : runnable_variants()) {
    KvBlockLayout cur = L;
    std::vector<uint8_t> blk = b16;
    uint32_t m = 1;  // M for the current width
    while (cur.bits > 1) {
      const KvBlockLayout half = halved_layout(cur);
      std::vector<uint8_t> out(half.bytes, 0xA5);
      shrink_block(cur, blk.data(), half, out.data(), quant_kernels_for(isa));
      blk.swap(out);
      cur = half;
      m = 65535u / ((1u << cur.bits) - 1u);
      // The direct block, from integers: codes X_16 / M rounded half up, the 16-bit params, layout
      // scale_mult = M.
      KvBlockLayout direct = make_kv_block_layout(Codec::uniform, GroupAxis::token, cur.bits, d, P, 8);
      direct.scale_mult = (float)m;
      std::vector<uint8_t> db(direct.bytes, 0);
      for (int t = 0; t < P; ++t)
        for (int c = 0; c < d; ++c)
          set_code(direct, db.data(), t, c, (uint32_t)round_half_up_ratio((uint32_t)(t * d + c) % 65536u, m));
      std::memcpy(db.data() + direct.scales_offset, b16.data() + L.scales_offset, 2 * L.n_params);
      std::memcpy(db.data() + direct.zeros_offset, b16.data() + L.zeros_offset, 2 * L.n_zeros);
      ASSERT_EQ(cur.scale_mult, direct.scale_mult) << isa_name(isa) << " bits " << cur.bits;
      ASSERT_EQ(blk, db) << isa_name(isa) << " bits " << cur.bits;
      std::vector<float> y((size_t)P * d), yd((size_t)P * d);
      dequantize_ref(cur, blk.data(), 0, P, y.data(), d);
      dequantize_ref(direct, db.data(), 0, P, yd.data(), d);
      for (int t = 0; t < P; ++t) {
        for (int c = 0; c < d; ++c) {
          const size_t pi = L.param_index(t, c);
          const double s16 = fp16_to_fp32(load_half(b16.data(), L.scales_offset, pi));
          const double z = fp16_to_fp32(load_half(b16.data(), L.zeros_offset, pi));
          const double code = (double)round_half_up_ratio((uint32_t)(t * d + c) % 65536u, m);
          const double exact = code * (s16 * m) + z;
          const float v = y[(size_t)t * d + c];
          ASSERT_EQ(v, yd[(size_t)t * d + c]);
          ASSERT_NEAR(v, exact, kFp32Rel * (code * s16 * m + std::fabs(z)) + 1e-30)
              << isa_name(isa) << " bits " << cur.bits << " t=" << t << " c=" << c;
        }
      }
    }
  }
}

// The float path on real data: quantize random vectors at 16 bits, shrink down the ladder, and
// compare each dequantized value with the exact requantization of the previous step's value.
TEST(EquivalentShift, FloatPathWithinFp32Rounding) {
  // fp32 dequantization code * (S * mult) + Z: a few fp32 roundings of the terms.
  constexpr double kFp32Rel = 4 * 1.1920929e-07;
  const int d = 64, P = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x((size_t)P * d);
  for (float& v : x) v = nd(rng) * 3.0f + 0.5f;
  KvQuantizer q16({QuantMethod::uniform, KvRole::key, 16, d, 0}, quant_kernels_for(Isa::scalar));
  KvBlockLayout L = q16.block_layout(P);
  std::vector<uint8_t> blk(L.bytes);
  q16.quantize(L, x.data(), d, 0, P, blk.data());
  std::vector<float> prev((size_t)P * d), cur((size_t)P * d);
  dequantize_ref(L, blk.data(), 0, P, prev.data(), d);
  while (L.bits > 1) {
    const KvBlockLayout H = halved_layout(L);
    std::vector<uint8_t> hb(H.bytes);
    shrink_block(L, blk.data(), H, hb.data(), quant_kernels_for(Isa::scalar));
    dequantize_ref(H, hb.data(), 0, P, cur.data(), d);
    const int b = H.bits;
    for (int t = 0; t < P; ++t) {
      for (int c = 0; c < d; ++c) {
        const size_t pi = L.param_index(t, c);
        const double s = fp16_to_fp32(load_half(blk.data(), L.scales_offset, pi)) * (double)L.scale_mult;
        const double z = fp16_to_fp32(load_half(blk.data(), L.zeros_offset, pi));
        const double sb_exact = s * ((1 << b) + 1);
        const uint32_t x2b = get_code(L, blk.data(), t, c);
        // exact dequantize (double holds code * S + Z exactly here) then requantize half up
        const double xhat = (double)x2b * s + z;
        const double req = std::floor((xhat - z) / sb_exact + 0.5);
        const uint32_t xb = get_code(H, hb.data(), t, c);
        ASSERT_EQ((double)xb, req) << "2b=" << 2 * b << " t=" << t << " c=" << c;
        const double exact = xb * sb_exact + z;
        const double tol = kFp32Rel * (xb * sb_exact + std::fabs(z));
        ASSERT_NEAR(cur[(size_t)t * d + c], exact, tol);
        // and the shrunk value is within half a new step of the previous one (plus the rounding)
        ASSERT_LE(std::fabs(cur[(size_t)t * d + c] - prev[(size_t)t * d + c]), 0.5 * sb_exact + 2 * tol);
      }
    }
    L = H;
    blk.swap(hb);
    prev.swap(cur);
  }
}

TEST(EquivalentShift, RejectsWhatCannotBeHalved) {
  const KvBlockLayout l3 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 3, 64, 4, 64);
  EXPECT_THROW(halved_layout(l3), Error);
  const KvBlockLayout l1 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 1, 64, 4, 64);
  EXPECT_THROW(halved_layout(l1), Error);
  const KvBlockLayout lt = make_kv_block_layout(Codec::lloyd_max, GroupAxis::token, 4, 64, 4, 64);
  EXPECT_THROW(halved_layout(lt), Error);
  const KvBlockLayout l8 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 8, 64, 4, 64);
  const KvBlockLayout l2 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 2, 64, 4, 64);
  std::vector<uint8_t> a(l8.bytes), b(l8.bytes);
  try {
    shrink_block(l8, a.data(), l2, b.data());
    FAIL() << "8 -> 2 is not a halving";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 -> 2"), std::string::npos) << e.what();
  }
  const KvBlockLayout other = make_kv_block_layout(Codec::uniform, GroupAxis::token, 4, 64, 8, 64);
  EXPECT_THROW(shrink_block(l8, a.data(), other, b.data()), Error);
  // A destination that forgets the ladder factor (scale_mult 1) would read the kept scale as S_b.
  const KvBlockLayout l4 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 4, 64, 4, 64);
  EXPECT_THROW(shrink_block(l8, a.data(), l4, b.data()), Error);
  EXPECT_NO_THROW(shrink_block(l8, a.data(), halved_layout(l8), b.data()));
  // Fresh codes are never written into a shrunk layout.
  KvQuantizer q4({QuantMethod::uniform, KvRole::key, 4, 64, 0});
  std::vector<float> x(64, 1.0f);
  EXPECT_THROW(q4.quantize(halved_layout(l8), x.data(), 64, 0, 1, b.data()), InternalError);
}

}  // namespace
}  // namespace mpkv

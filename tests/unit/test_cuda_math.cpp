// The CUDA kernels' per-element math (src/cuda/kv_math_hd.h, device_block_layout.h), compiled
// here by g++ and checked against the CPU definitions they restate: the same group parameters,
// codes, packed blocks, shifted codes and dequantized values, bit for bit, and the same softmax
// merge. The device compiles the same helpers (tests/cuda checks them on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention/attention_f16.h"
#include "cuda/device_block_layout.h"
#include "cuda/kv_math_hd.h"
#include "quant/equivalent_shift.h"
#include "quant/kv_block_layout.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_kernels.h"
#include "quant/uniform_params.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv::cuda {
namespace {

const int kAllBits[] = {1, 2, 3, 4, 8, 16};

// Values an fp16 KV row can hold, with a spread of magnitudes and a few exact repeats.
std::vector<float> half_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = fp16_to_fp32(fp32_to_fp16(nd(rng) * std::pow(10.0f, mag(rng))));
  return v;
}

TEST(CudaMath, GroupParamsMatchUniformGroupParams) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::vector<std::pair<float, float>> cases = {{0, 0},       {-0.0f, 0.0f}, {1, 1},      {-1, 1},     {-70000, 70000},
                                                {nan, 1},     {1, nan},      {-inf, inf}, {3, 2},      {1e-9f, 2e-9f},
                                                {-1e-9f, 0},  {65504, 65504}, {-5, -4.99f}};
  std::mt19937 rng(7);
  const std::vector<float> v = half_values(4000, 11);
  for (size_t i = 0; i + 1 < v.size(); i += 2) cases.push_back({std::min(v[i], v[i + 1]), std::max(v[i], v[i + 1])});
  for (int bits : kAllBits) {
    for (auto [lo, hi] : cases) {
      const UniformGroupParams want = uniform_group_params(lo, hi, bits);
      const GroupParams got = group_params(lo, hi, bits);
      ASSERT_EQ(got.scale_h, want.scale_h) << lo << " " << hi << " bits " << bits;
      ASSERT_EQ(got.zero_h, want.zero_h) << lo << " " << hi << " bits " << bits;
      const float qmax = (float)((1u << bits) - 1u);
      for (float x : {lo, hi, 0.5f * (lo + hi), nan, inf, -inf})
        ASSERT_EQ(uniform_code_of(x, got.scale, got.zero, qmax), uniform_code(x, want.scale, want.zero, qmax));
    }
  }
}

// Quantizes rows [0, n) with the helpers, one call per group / run, as the device threads do.
void quantize_with_helpers(const DeviceBlockLayout& L, const std::vector<float>& x, int n, uint8_t* blk) {
  const int d = L.head_dim;
  if (L.format == BlockFormat::uniform_token) {
    for (int t = 0; t < n; ++t)
      for (int g0 = 0; g0 < d; g0 += L.group)
        quantize_token_group(L, blk, t, g0, [&](int c) { return x[(size_t)t * d + c]; });
  } else {
    for (int t0 = 0; t0 < n; t0 += L.group)
      for (int c0 = 0; c0 < d; c0 += 8)
        quantize_channel_run(L, blk, t0, c0, [&](int i, int c) { return x[(size_t)(t0 + i) * d + c]; });
  }
}

struct LayoutCase {
  GroupAxis axis;
  int group;
};
const LayoutCase kLayouts[] = {{GroupAxis::token, 64}, {GroupAxis::token, 32}, {GroupAxis::token, 8},
                               {GroupAxis::channel, 64}, {GroupAxis::channel, 32}, {GroupAxis::channel, 8}};

TEST(CudaMath, QuantizedBlocksMatchQuantizeRefBitForBit) {
  const int d = 64, P = 64;
  const std::vector<float> x = half_values((size_t)P * d, 3);
  for (int bits : kAllBits) {
    for (const LayoutCase& lc : kLayouts) {
      const KvBlockLayout H = make_kv_block_layout(Codec::uniform, lc.axis, bits, d, P, lc.group);
      const DeviceBlockLayout D = to_device_layout(H);
      ASSERT_EQ(D.bytes, H.bytes);
      std::vector<uint8_t> want(H.bytes, 0xA5), got(H.bytes, 0x5A);  // different garbage: every byte written
      quantize_ref(H, x.data(), d, 0, P, want.data());
      quantize_with_helpers(D, x, P, got.data());
      ASSERT_EQ(got, want) << "bits " << bits << " group " << lc.group << " axis " << (int)lc.axis;
    }
  }
}

TEST(CudaMath, DequantizedValuesMatchDequantizeRefIncludingLadderScales) {
  const int d = 64, P = 64;  // P: a multiple of every group of kLayouts (KIVI groups up to 64 tokens)
  const std::vector<float> x = half_values((size_t)P * d, 5);
  for (const LayoutCase& lc : kLayouts) {
    KvBlockLayout H = make_kv_block_layout(Codec::uniform, lc.axis, 16, d, P, lc.group);
    std::vector<uint8_t> blk(H.bytes);
    quantize_ref(H, x.data(), d, 0, P, blk.data());
    while (true) {  // 16, then every halving (scale_mult 257, 4369, 21845, 65535)
      const DeviceBlockLayout D = to_device_layout(H);
      std::vector<float> want((size_t)P * d);
      dequantize_ref(H, blk.data(), 0, P, want.data(), d);
      for (int t = 0; t < P; ++t)
        for (int c = 0; c < d; ++c)
          ASSERT_EQ(fp32_to_bits(dequant_at(D, blk.data(), t, c)), fp32_to_bits(want[(size_t)t * d + c]))
              << "bits " << H.bits << " scale_mult " << H.scale_mult;
      // A decode lane's runs of 2 and 4 channels (head_dim 64 and 128 over 32 lanes), and runs of
      // 16 that cross channel groups of 8.
      for (int n : {2, 4, 16})
        for (int t = 0; t < P; ++t)
          for (int c0 = 0; c0 < d; c0 += n) {
            float run[16];
            dequant_run(D, blk.data(), t, c0, n, run);
            for (int k = 0; k < n; ++k)
              ASSERT_EQ(fp32_to_bits(run[k]), fp32_to_bits(want[(size_t)t * d + c0 + k])) << "run of " << n;
          }
      if (H.bits == 1) break;
      const KvBlockLayout half = halved_layout(H);
      std::vector<uint8_t> next(half.bytes);
      shrink_ref(H, blk.data(), half, next.data());
      H = half;
      blk = std::move(next);
    }
    EXPECT_EQ(H.scale_mult, 65535.0f);
  }
}

TEST(CudaMath, F16RowsDecodeAsStored) {
  const int d = 32, P = 4;
  const DeviceBlockLayout D = f16_rows_layout(d, P);
  std::vector<uint16_t> rows((size_t)P * d);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = fp32_to_fp16((float)i * 0.37f - 9.0f);
  const uint8_t* blk = reinterpret_cast<const uint8_t*>(rows.data());
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < d; ++c) ASSERT_EQ(dequant_at(D, blk, t, c), fp16_to_fp32(rows[(size_t)t * d + c]));
  float run[8];
  dequant_run(D, blk, 2, 8, 8, run);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(run[k], fp16_to_fp32(rows[(size_t)2 * d + 8 + k]));
  EXPECT_EQ(D.bytes, (uint32_t)(P * d * 2));
}

TEST(CudaMath, ShiftCodeEqualsEquivalentShiftForEveryCode) {
  for (int b : {8, 4, 2, 1})
    for (uint32_t x = 0; x < (1u << (2 * b)); ++x) ASSERT_EQ(shift_code(x, b), equivalent_shift_code(x, b)) << b;
}

TEST(CudaMath, ShrinkCodeByteEqualsShrinkRefForEveryByteOfCodes) {
  // A block whose code bytes hold every 16-bit pattern once (d = 64 channels at 2b bits = 16 b
  // bytes per row), shrunk by shrink_ref and byte by byte.
  for (int b : {8, 4, 2, 1}) {
    const int d = 64, row_bytes = d * 2 * b / 8, rows = 65536 * 2 / row_bytes;
    const KvBlockLayout src = make_kv_block_layout(Codec::uniform, GroupAxis::token, 2 * b, d, rows, d);
    const KvBlockLayout dst = halved_layout(src);
    std::vector<uint8_t> in(src.bytes, 0), want(dst.bytes);
    for (uint32_t w = 0; w < 65536; ++w) in[2 * w] = (uint8_t)(w & 0xff), in[2 * w + 1] = (uint8_t)(w >> 8);
    shrink_ref(src, in.data(), dst, want.data());
    for (uint32_t k = 0; k < 65536; ++k) ASSERT_EQ(shrink_code_byte(in[2 * k], in[2 * k + 1], b), want[k]) << b;
  }
}

TEST(CudaMath, MergeWeightsGiveSoftmaxPartialMerge) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  const int d = 16;
  for (int trial = 0; trial < 200; ++trial) {
    float ma = u(rng), mb = trial % 5 == 0 ? ma : u(rng), la = std::abs(u(rng)) + 1, lb = std::abs(u(rng)) + 1;
    std::vector<float> aa(d), ba(d);
    for (int c = 0; c < d; ++c) aa[c] = u(rng), ba[c] = u(rng);
    float m1 = ma, l1 = la, m2 = mb, l2 = lb;
    std::vector<float> a1 = aa, b1 = ba;
    softmax_partial_merge({&m1, &l1, a1.data()}, {&m2, &l2, b1.data()}, 1, d);
    const MergeWeights w = merge_weights(ma, mb);
    EXPECT_EQ(w.m, m1);
    EXPECT_EQ(la * w.wa + lb * w.wb, l1);
    for (int c = 0; c < d; ++c) EXPECT_EQ(aa[c] * w.wa + ba[c] * w.wb, a1[c]);
  }
  // An empty side (nothing seen) weighs nothing, and two empty sides stay empty, without NaN.
  const float inf = std::numeric_limits<float>::infinity();
  MergeWeights w = merge_weights(-inf, 2.0f);
  EXPECT_EQ(w.m, 2.0f);
  EXPECT_EQ(w.wa, 0.0f);
  EXPECT_EQ(w.wb, 1.0f);
  w = merge_weights(-inf, -inf);
  EXPECT_EQ(w.m, -inf);
  EXPECT_EQ(w.wa, 0.0f);
  EXPECT_EQ(w.wb, 0.0f);
}

TEST(CudaMath, LloydMaxBlocksAreRejectedForTheDevice) {
  const KvBlockLayout H = make_kv_block_layout(Codec::lloyd_max, GroupAxis::token, 2, 64, 16, 64);
  EXPECT_THROW(to_device_layout(H), Error);
}

}  // namespace
}  // namespace mpkv::cuda

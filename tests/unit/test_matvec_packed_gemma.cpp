// The packed layouts of Gemma-3-270M's layer types: Q4_K, Q6_K (matvec_packed_kquant.h) and Q5_0
// (matvec_packed_q5_0.h). The repacked blocks hold exactly the GGUF weights (unpacked against
// dequantize_row); every kernel table this CPU can run gives, through the whole driver, exactly
// the layout's per-pair arithmetic computed here from the GGUF blocks (not from the packed bytes),
// for row counts that leave a partial last group, batches that leave every kernel tile tail and
// more than one activation panel, and 1 / 2 / 3 threads (test_matvec_packed_harness.h); the result
// is within the error bound of the exact product; and a model-shaped shared call is each matrix's own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/dequant.h"
#include "gguf/kquant_scales.h"
#include "matvec/matvec.h"
#include "matvec/matvec_packed.h"
#include "matvec/matvec_packed_kquant.h"
#include "matvec/matvec_packed_q5_0.h"
#include "test_matvec_blocks.h"
#include "test_matvec_packed_harness.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

using test::activation_rows;
using test::make_test_matrix;
using test::TestMatrix;

// Code l of 32-column piece k of a super-block, straight from the GGUF bit layout (ggml's
// dequantize_row_q4_K / q6_K): Q4_K nibbles of qs[32 (k / 2) + l]; Q6_K q - 32 with
// the 4 low bits from ql[64 (k / 4) + 32 (k % 2) + l] (high nibble when k % 4 >= 2) and
// the 2 high bits (2 (k % 4)) of qh[32 (k / 4) + l].
int gguf_q4_k_code(const BlockQ4_K& w, int k, int l) { return (w.qs[32 * (k / 2) + l] >> (4 * (k % 2))) & 15; }
int gguf_q6_k_code(const BlockQ6_K& w, int k, int l) {
  const int lo = (w.ql[64 * (k / 4) + 32 * (k % 2) + l] >> (4 * ((k % 4) / 2))) & 15;
  const int hi = (w.qh[32 * (k / 4) + l] >> (2 * (k % 4))) & 3;
  return (lo | hi << 4) - 32;
}

// Code j (q in [0, 31]) of a GGUF Q5_0 block: low 4 bits from qs[j % 16] (high nibble for j >= 16),
// bit 4 = bit j of qh.
int gguf_q5_0_code(const BlockQ5_0& w, int j) {
  uint32_t qh;
  std::memcpy(&qh, w.qh, 4);
  return ((w.qs[j % 16] >> (4 * (j / 16))) & 15) | ((qh >> j) & 1) << 4;
}

// The pair arithmetic of matvec_packed_kquant.h / matvec_packed_q5_0.h, from row r's GGUF blocks
// and activation row xq.
float pair_spec(const TestMatrix& m, int64_t r, const BlockQ8Act* xq) {
  const uint8_t* row = m.bytes.data() + (size_t)r * m.row_bytes;
  float acc = 0.0f;
  for (int64_t b = 0; b < m.cols / 32; ++b) {
    const int64_t sb = b / 8;
    const int k = (int)(b % 8);
    const BlockQ8Act& a = xq[b];
    if (m.type == GgmlType::Q5_0) {
      const BlockQ5_0& w = reinterpret_cast<const BlockQ5_0*>(row)[b];
      int isum = 0;
      for (int j = 0; j < 32; ++j) isum += gguf_q5_0_code(w, j) * a.qs[j];
      acc = std::fma(fp16_to_fp32(w.d) * a.d, (float)isum, acc);
      acc = std::fma(-16.0f * fp16_to_fp32(w.d), a.s, acc);
    } else if (m.type == GgmlType::Q4_K) {
      const BlockQ4_K& w = reinterpret_cast<const BlockQ4_K*>(row)[sb];
      uint8_t sc, mn;
      k_scale_min(k, w.scales, &sc, &mn);
      int isum = 0;
      for (int l = 0; l < 32; ++l) isum += gguf_q4_k_code(w, k, l) * a.qs[l];
      acc = std::fma(fp16_to_fp32(w.d) * (float)sc * a.d, (float)isum, acc);
      acc = std::fma(-(fp16_to_fp32(w.dmin) * (float)mn), a.s, acc);
    } else {
      const BlockQ6_K& w = reinterpret_cast<const BlockQ6_K*>(row)[sb];
      int lo = 0, hi = 0;
      for (int l = 0; l < 16; ++l) lo += gguf_q6_k_code(w, k, l) * a.qs[l];
      for (int l = 16; l < 32; ++l) hi += gguf_q6_k_code(w, k, l) * a.qs[l];
      acc = std::fma(fp16_to_fp32(w.d) * a.d, (float)(w.scales[2 * k] * lo + w.scales[2 * k + 1] * hi), acc);
    }
  }
  return acc;
}

template <class T>
T load_at(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Weight j of row r in block (piece) b of its group, read back from the packed bytes (the layouts
// of matvec_packed_kquant.h / matvec_packed_q5_0.h): Q4_K D * q + M, Q6_K (d * sc) * c, Q5_0
// (q - 16) * d, with Q5_0's m checked to be -16 d.
float unpacked_weight(const PackedMatrix& p, int64_t row, int64_t b, int j) {
  const int r = (int)(row % kPackRows);
  if (p.type() == GgmlType::Q5_0) {
    const uint8_t* blk = p.group(row / kPackRows) + (size_t)b * kPackedQ5_0BlockBytes;
    const uint8_t byte = blk[kPackedChunkBytes * ((j % 16) / 4) + 4 * r + j % 4];
    const int q = (j < 16 ? byte & 15 : byte >> 4) | ((blk[kPackedQ5_0HighBitsAt + 4 * r + j % 4] >> (j / 4)) & 1) << 4;
    const float d = fp16_to_fp32(load_at<uint16_t>(blk + kPackedQ5_0ScaleAt + 2 * r));
    EXPECT_EQ(fp16_to_fp32(load_at<uint16_t>(blk + kPackedQ5_0MinAt + 2 * r)), -16.0f * d) << "m of row " << row;
    return (float)(q - 16) * d;
  }
  if (p.type() == GgmlType::Q4_K) {
    const uint8_t* blk = p.group(row / kPackRows) + (size_t)b * kPackedQ4_KBlockBytes;
    const uint8_t byte = blk[kPackedChunkBytes * ((j % 16) / 4) + 4 * r + j % 4];
    const int q = j < 16 ? byte & 15 : byte >> 4;
    return load_at<float>(blk + kPackedQ4_KScaleAt + 4 * r) * (float)q + load_at<float>(blk + kPackedQ4_KMinAt + 4 * r);
  }
  const uint8_t* blk = p.group(row / kPackRows) + (size_t)b * kPackedQ6_KBlockBytes;
  const int c = (int8_t)blk[kPackedChunkBytes * (j / 4) + 4 * r + j % 4];
  const uint8_t* sc_at = blk + kPackedQ6_KSubScaleAt + kPackedQ6_KSubScaleBytes * (j / 16) + 4 * r;
  EXPECT_EQ(load_at<int16_t>(sc_at), load_at<int16_t>(sc_at + 2)) << "the scale pair of row " << row;
  const float d = fp16_to_fp32(load_at<uint16_t>(blk + kPackedQ6_KScaleAt + 2 * r));
  return d * (float)load_at<int16_t>(sc_at) * (float)c;
}

class MatvecPackedGemma : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatvecPackedGemma, RepackedPiecesHoldTheDequantizedWeightsAndZeroPastTheLastRow) {
  const TestMatrix m = make_test_matrix(GetParam(), 21, 512, 3, /*pad=*/6);
  const std::unique_ptr<PackedMatrix> p = pack_weight_matrix(m.view());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->groups(), 2);
  std::vector<float> want(m.cols);
  for (int64_t row = 0; row < 2 * kPackRows; ++row) {
    if (row < m.rows) dequantize_row(m.type, m.bytes.data() + (size_t)row * m.row_bytes, want.data(), m.cols);
    for (int64_t j = 0; j < m.cols; ++j) {
      const float got = unpacked_weight(*p, row, j / 32, (int)(j % 32));
      ASSERT_EQ(got, row < m.rows ? want[j] : 0.0f) << "row " << row << " column " << j;
    }
  }
}

TEST_P(MatvecPackedGemma, EveryTableThreadCountAndBatchGivesThePairArithmetic) {
  test::expect_every_table_gives_pair_spec(GetParam(), pair_spec, {21, 16, 1, 45}, {256, 768}, 11);
}

TEST_P(MatvecPackedGemma, WithinTheErrorBoundOfTheExactProduct) { test::expect_packed_within_error_bound(GetParam(), 37, 1024); }

INSTANTIATE_TEST_SUITE_P(Types, MatvecPackedGemma, ::testing::Values(GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0),
                         [](const ::testing::TestParamInfo<GgmlType>& i) { return ggml_type_name((uint32_t)i.param); });

// Gemma-3-270M's layer mix in one shared call (a packed Q4_K and a packed Q6_K matrix, 2048
// columns; Q5_0 and Q4_K): each output is what its own call gives.
void expect_shared_call_is_each_own(GgmlType ta, GgmlType tb) {
  const TestMatrix a = make_test_matrix(ta, 40, 2048, 8), b = make_test_matrix(tb, 19, 2048, 9);
  const std::unique_ptr<PackedMatrix> pa = pack_weight_matrix(a.view()), pb = pack_weight_matrix(b.view());
  WeightMatrix wa = a.view(), wb = b.view();
  wa.packed = pa.get();
  wb.packed = pb.get();
  constexpr int kN = 6;
  const std::vector<float> x = activation_rows(2048, kN, 40);
  std::vector<float> ya(kN * 40), yb(kN * 19), ya1(kN * 40), yb1(kN * 19);
  matmul_rows_shared({{&wa, ya.data()}, {&wb, yb.data()}}, x.data(), kN);
  matmul_rows(wa, x.data(), ya1.data(), kN);
  matmul_rows(wb, x.data(), yb1.data(), kN);
  EXPECT_EQ(ya, ya1);
  EXPECT_EQ(yb, yb1);
}

TEST(MatvecPackedGemmaShared, SharedCallOfPackedMatricesIsEachMatrixsOwnCall) {
  expect_shared_call_is_each_own(GgmlType::Q4_K, GgmlType::Q6_K);
  expect_shared_call_is_each_own(GgmlType::Q5_0, GgmlType::Q4_K);
}

TEST(MatvecPackedGemmaLayouts, Q4_KQ6_KAndQ5_0ArePackedQ5_KIsNot) {
  EXPECT_TRUE(has_packed_layout(GgmlType::Q4_K));
  EXPECT_TRUE(has_packed_layout(GgmlType::Q6_K));
  EXPECT_TRUE(has_packed_layout(GgmlType::Q5_0));
  EXPECT_FALSE(has_packed_layout(GgmlType::Q5_K));
  const TestMatrix q5 = make_test_matrix(GgmlType::Q5_K, 4, 256, 1);
  EXPECT_EQ(pack_weight_matrix(q5.view()), nullptr);
  EXPECT_EQ(packed_kquant_block_bytes(GgmlType::Q4_1), 0u);
}

// A Q5_0 scale whose m = -16 d would overflow fp16 is an Error, not a wrong packed copy.
TEST(MatvecPackedGemmaLayouts, Q5_0ScaleTooLargeToPackIsAnError) {
  TestMatrix m = make_test_matrix(GgmlType::Q5_0, 3, 64, 2);
  const uint16_t big = fp32_to_fp16(8192.0f);
  std::memcpy(m.bytes.data() + m.row_bytes + sizeof(BlockQ5_0), &big, 2);  // row 1, block 1
  EXPECT_THROW(pack_weight_matrix(m.view()), Error);
}

}  // namespace
}  // namespace mpkv

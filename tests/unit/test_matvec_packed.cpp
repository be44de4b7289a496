// The packed (row-interleaved) weight path (matvec_packed.h): every kernel table this CPU can run
// gives, through the whole driver, exactly the per-pair arithmetic the layout defines, computed
// here from the GGUF blocks (not from the packed bytes); whatever the number of activation rows
// (tails of every kernel tile width, more than one activation panel), rows not a multiple of 8,
// and 1 / 2 / 3 threads. Plus the error bound against the exact product and bad input.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "matvec/matvec.h"
#include "matvec/matvec_packed.h"
#include "test_matvec_blocks.h"
#include "test_matvec_packed_harness.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

using test::activation_rows;
using test::make_test_matrix;
using test::TestMatrix;

// The pair arithmetic of matvec_packed.h, from row r's GGUF blocks and activation row xq.
float pair_spec(const TestMatrix& m, int64_t r, const BlockQ8Act* xq) {
  const uint8_t* row = m.bytes.data() + (size_t)r * m.row_bytes;
  float acc = 0.0f;
  for (int64_t b = 0; b < m.cols / 32; ++b) {
    if (m.type == GgmlType::Q8_0) {
      const BlockQ8_0& w = reinterpret_cast<const BlockQ8_0*>(row)[b];
      int isum = 0;
      for (int j = 0; j < 32; ++j) isum += w.qs[j] * xq[b].qs[j];
      acc = std::fma(fp16_to_fp32(w.d) * xq[b].d, (float)isum, acc);
      continue;
    }
    const BlockQ4_1& w = reinterpret_cast<const BlockQ4_1*>(row)[b];
    int isum = 0;
    for (int j = 0; j < 16; ++j) isum += (w.qs[j] & 0x0f) * xq[b].qs[j] + (w.qs[j] >> 4) * xq[b].qs[j + 16];
    acc = std::fma(fp16_to_fp32(w.d) * xq[b].d, (float)isum, acc);
    acc = std::fma(fp16_to_fp32(w.m), xq[b].s, acc);
  }
  return acc;
}

class MatvecPacked : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatvecPacked, EveryTableThreadCountAndBatchGivesThePairArithmetic) {
  test::expect_every_table_gives_pair_spec(GetParam(), pair_spec, {21, 16, 1, 301}, {96, 576}, 7);
}

TEST_P(MatvecPacked, WithinTheErrorBoundOfTheExactProduct) { test::expect_packed_within_error_bound(GetParam(), 37, 512); }

INSTANTIATE_TEST_SUITE_P(Types, MatvecPacked, ::testing::Values(GgmlType::Q4_1, GgmlType::Q8_0),
                         [](const ::testing::TestParamInfo<GgmlType>& i) { return ggml_type_name((uint32_t)i.param); });

// Packed and GGUF-layout matrices in one shared call: each output is what its own call gives.
TEST(MatvecPackedShared, SharedCallMixesPackedAndUnpackedMatrices) {
  const TestMatrix a = make_test_matrix(GgmlType::Q4_1, 45, 576, 8), b = make_test_matrix(GgmlType::Q8_0, 19, 576, 9);
  const std::unique_ptr<PackedMatrix> p = pack_weight_matrix(a.view());
  WeightMatrix wa = a.view();
  wa.packed = p.get();
  const WeightMatrix wb = b.view();
  constexpr int kN = 6;
  const std::vector<float> x = activation_rows(576, kN, 40);
  std::vector<float> ya(kN * 45), yb(kN * 19), ya1(kN * 45), yb1(kN * 19);
  matmul_rows_shared({{&wa, ya.data()}, {&wb, yb.data()}}, x.data(), kN);
  matmul_rows(wa, x.data(), ya1.data(), kN);
  matmul_rows(wb, x.data(), yb1.data(), kN);
  EXPECT_EQ(ya, ya1);
  EXPECT_EQ(yb, yb1);
}

TEST(MatvecPackedErrors, OnlyTypesWithALayoutArePackedAndAMismatchedCopyIsAnError) {
  EXPECT_TRUE(has_packed_layout(GgmlType::Q4_1));
  EXPECT_TRUE(has_packed_layout(GgmlType::Q8_0));
  const TestMatrix q4 = make_test_matrix(GgmlType::Q4_0, 8, 64, 1);
  EXPECT_EQ(pack_weight_matrix(q4.view()), nullptr);
  const TestMatrix a = make_test_matrix(GgmlType::Q4_1, 16, 64, 2), b = make_test_matrix(GgmlType::Q4_1, 8, 64, 3);
  const std::unique_ptr<PackedMatrix> pb = pack_weight_matrix(b.view());
  WeightMatrix w = a.view();
  w.packed = pb.get();  // 8 rows packed, 16 in the matrix
  std::vector<float> x(64, 1.0f), y(16, -7.0f);
  EXPECT_THROW(matvec(w, x.data(), y.data()), Error);
  EXPECT_EQ(y, std::vector<float>(16, -7.0f));
  WeightMatrix bad = b.view();
  bad.cols = 48;  // not a multiple of 32
  EXPECT_THROW(pack_weight_matrix(bad), Error);
}

}  // namespace
}  // namespace mpkv

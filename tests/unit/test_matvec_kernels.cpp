// Kernel-level tests: activation quantization, each integer-dot and float-dot kernel of the _ref
// table against a double-precision reference, and each SIMD table against _ref.
// Bounds and their derivation: see test_matvec_blocks.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "matvec/matvec_kernels.h"
#include "test_matvec_blocks.h"
#include "util/cpu_features.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

using test::fp32_rel_bound;
using test::kActStepSlack;
using test::make_activations;
using test::make_test_matrix;
using test::row_bounds;

// SIMD vs _ref: identical activation codes and integer block sums; only the fp32 summation order
// (two accumulators, 8/16 lanes, pairs of offset terms) differs, so each side is within the
// fp32_rel_bound of the exact block sum and the difference is within twice that -- ~1e-5 of
// sum_j mag_j |x_j|, some 500x tighter than the activation-quantization bound.
constexpr double kSimdVsRefFactor = 2.0;

const GgmlType kQuantTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
// Column counts: 1 block, odd block counts (tails of the 2-block loops), the model's 576 and 1536;
// for the K-quants (super-blocks of 256): 1, 2, 3 super-blocks, SmolLM2's 1536, Gemma-3's 1024 / 2048.
std::vector<int64_t> quant_cols(GgmlType t) {
  if (test::is_k_quant_type(t)) return {256, 512, 768, 1024, 1536, 2048};
  return {32, 64, 96, 224, 576, 1536};
}
// Float-dot lengths: below one vector, ragged tails after 8/16/32/64-wide loops.
const int64_t kFloatCols[] = {1, 7, 15, 33, 100, 577, 1536};

bool cpu_has(Isa isa) { return (int)best_isa() >= (int)isa; }

#define REQUIRE_ISA(isa)                                                                           \
  if (!cpu_has(isa)) GTEST_SKIP() << "this CPU lacks " << isa_name(isa) << " (best: " << isa_name(best_isa()) \
                                  << "); the variant compiles but cannot run here"

std::vector<BlockQ8Act> quantize(const MatvecKernels& k, const std::vector<float>& x) {
  std::vector<BlockQ8Act> q(x.size() / kActBlock);
  k.quantize_act(x.data(), q.data(), (int64_t)x.size());
  return q;
}

// ---- activation quantization ----------------------------------------------------------------

TEST(MatvecQuantizeAct, RefMeetsItsContract) {
  const std::vector<float> x = make_activations(1536, 7);
  const std::vector<BlockQ8Act> q = quantize(matvec_kernels_ref(), x);
  for (size_t b = 0; b < q.size(); ++b) {
    double amax = 0;
    long sum = 0;
    int qmax = 0;
    for (int j = 0; j < kActBlock; ++j) {
      amax = std::fmax(amax, std::fabs((double)x[b * 32 + j]));
      sum += q[b].qs[j];
      qmax = std::max(qmax, std::abs((int)q[b].qs[j]));
    }
    if (amax == 0) {  // the all-zero block
      EXPECT_EQ(q[b].d, 0.0f);
      EXPECT_EQ(q[b].s, 0.0f);
      EXPECT_EQ(qmax, 0);
      continue;
    }
    EXPECT_NEAR(q[b].d, amax / 127.0, amax / 127.0 * 1e-6) << "block " << b;
    EXPECT_EQ(qmax, 127) << "the largest |x| maps to 127, block " << b;
    // s = d * sum(q) rounded once to fp32.
    EXPECT_NEAR(q[b].s, (double)q[b].d * sum, std::fabs((double)q[b].d * sum) * 1e-7 + 1e-30) << "block " << b;
    for (int j = 0; j < kActBlock; ++j) {
      const double err = std::fabs((double)x[b * 32 + j] - (double)q[b].d * q[b].qs[j]);
      EXPECT_LE(err, q[b].d * 0.5 * (1 + kActStepSlack)) << "block " << b << " element " << j;
    }
  }
}

TEST(MatvecQuantizeAct, RefRoundsHalfToEven) {
  // amax = 127 -> d = 1, id = 1: x * id is x itself, so the ties are exact.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 3.5f;
  x[4] = 0.49f;
  const std::vector<BlockQ8Act> q = quantize(matvec_kernels_ref(), x);
  EXPECT_EQ(q[0].d, 1.0f);
  EXPECT_EQ(q[0].qs[0], 127);
  EXPECT_EQ(q[0].qs[1], 2);
  EXPECT_EQ(q[0].qs[2], -2);
  EXPECT_EQ(q[0].qs[3], 4);
  EXPECT_EQ(q[0].qs[4], 0);
  EXPECT_EQ(q[0].s, 127.0f + 2 - 2 + 4);
}

void expect_same_quantization(const MatvecKernels& k) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    std::vector<float> x = make_activations(1536, seed);
    // Block 3 with d = 1 exactly, holding exact ties (63.5 -> 64, -62.5 -> -62, 0.5 -> 0).
    for (int j = 96; j < 128; ++j) x[j] = 0.5f;
    x[96] = 127.0f;
    x[100] = 63.5f;
    x[101] = -62.5f;
    const std::vector<BlockQ8Act> a = quantize(matvec_kernels_ref(), x), b = quantize(k, x);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].d, b[i].d) << k.name << " block " << i;
      EXPECT_EQ(a[i].s, b[i].s) << k.name << " block " << i;
      for (int j = 0; j < kActBlock; ++j) ASSERT_EQ(a[i].qs[j], b[i].qs[j]) << k.name << " block " << i << " j " << j;
    }
  }
}

// Same scalar d and 1/d, same IEEE multiply and round-half-even: the codes must be identical.
TEST(MatvecQuantizeAct, Avx2BitIdenticalToRef) {
  REQUIRE_ISA(Isa::avx2);
  expect_same_quantization(matvec_kernels_avx2());
}

TEST(MatvecQuantizeAct, Avx512BitIdenticalToRef) {
  REQUIRE_ISA(Isa::avx512);
  expect_same_quantization(matvec_kernels_avx512());
}

// ---- integer-dot kernels ----------------------------------------------------------------------

class MatvecQuantDot : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatvecQuantDot, RefWithinActivationQuantizationBound) {
  const GgmlType t = GetParam();
  const MatvecKernels& k = matvec_kernels_ref();
  double worst_used = 0;  // largest |error| / bound seen, for the log
  for (int64_t cols : quant_cols(t)) {
    const test::TestMatrix m = make_test_matrix(t, 9, cols, 100 + (uint32_t)cols);
    const std::vector<float> x = make_activations(cols, 200 + (uint32_t)cols);
    const std::vector<BlockQ8Act> xq = quantize(k, x);
    for (int64_t r = 0; r < m.rows; ++r) {
      const float y = k.quant_dot(t)(m.bytes.data() + r * m.row_bytes, xq.data(), cols);
      const test::RowBounds rb = row_bounds(m, r, x.data());
      const double bound = rb.act_bound + fp32_rel_bound(t, cols) * rb.fp_scale;
      EXPECT_LE(std::fabs(y - rb.exact), bound) << ggml_type_name((uint32_t)t) << " cols " << cols << " row " << r;
      worst_used = std::max(worst_used, std::fabs(y - rb.exact) / bound);
    }
  }
  std::printf("  %s: worst |error| = %.2f of the bound\n", ggml_type_name((uint32_t)t).c_str(), worst_used);
}

void expect_quant_dot_matches_ref(const MatvecKernels& k, GgmlType t) {
  const MatvecKernels& ref = matvec_kernels_ref();
  ASSERT_NE(k.quant_dot(t), nullptr);
  for (int64_t cols : quant_cols(t)) {
    const test::TestMatrix m = make_test_matrix(t, 7, cols, 300 + (uint32_t)cols);
    const std::vector<float> x = make_activations(cols, 400 + (uint32_t)cols);
    const std::vector<BlockQ8Act> xq = quantize(ref, x);  // the same codes for both kernels
    for (int64_t r = 0; r < m.rows; ++r) {
      const uint8_t* row = m.bytes.data() + r * m.row_bytes;
      const float want = ref.quant_dot(t)(row, xq.data(), cols);
      const float got = k.quant_dot(t)(row, xq.data(), cols);
      const double tol = kSimdVsRefFactor * fp32_rel_bound(t, cols) * row_bounds(m, r, x.data()).fp_scale;
      EXPECT_NEAR(got, want, tol) << k.name << " " << ggml_type_name((uint32_t)t) << " cols " << cols << " row " << r;
    }
  }
}

TEST_P(MatvecQuantDot, Avx2MatchesRef) {
  REQUIRE_ISA(Isa::avx2);
  expect_quant_dot_matches_ref(matvec_kernels_avx2(), GetParam());
}

TEST_P(MatvecQuantDot, Avx512MatchesRef) {
  REQUIRE_ISA(Isa::avx512);
  expect_quant_dot_matches_ref(matvec_kernels_avx512(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Types, MatvecQuantDot, ::testing::ValuesIn(kQuantTypes),
                         [](const auto& info) { return ggml_type_name((uint32_t)info.param); });

// Q8_0 weights of -128 (possible in files even though ggml's quantizer writes [-127, 127]) must go
// through the |w| / sign trick unharmed: 128 as an unsigned byte, activation negated.
TEST(MatvecQuantDotEdge, Q8_0MinusOneTwentyEight) {
  BlockQ8_0 w{};
  w.d = fp32_to_fp16(1.0f);
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) {
    w.qs[j] = j % 2 ? -128 : 127;
    x[j] = j % 3 == 0 ? 127.0f : -127.0f;  // d = 1, codes = x exactly
  }
  double exact = 0;
  for (int j = 0; j < 32; ++j) exact += (double)w.qs[j] * x[j];
  for (const MatvecKernels* k : {&matvec_kernels_ref(), &matvec_kernels_avx2(), &matvec_kernels_avx512()}) {
    if (!cpu_has(k->isa)) continue;
    const std::vector<BlockQ8Act> xq = quantize(*k, x);
    EXPECT_EQ(k->dot_q8_0(&w, xq.data(), 32), (float)exact) << k->name;  // integers: exact
  }
}

// K-quant extremes, where the integer sums are largest (activations 127 everywhere, so dx = 1 and
// the codes are the x exactly): every partial sum is an integer below 2^26 and a multiple of 2^5
// or exactly representable, so every kernel must return the exact value bit for bit.
//   Q6_K: codes q - 32 = -32, all 16 scales -128: a piece's isum is 32 * 32 * 128 * 127 < 2^24.
//   Q5_K: codes 31, scales and mins 63 (all 12 scale bytes 0xff), d = dmin = 1.
//   Q4_K: codes 15, the same scales.
std::vector<float> all_127(int64_t n) { return std::vector<float>((size_t)n, 127.0f); }

TEST(MatvecQuantDotEdge, KQuantLargestIntegerSumsAreExact) {
  BlockQ6_K q6{};
  std::memset(&q6, 0, sizeof q6);  // ql = qh = 0: q = 0, code -32
  for (auto& sc : q6.scales) sc = -128;
  q6.d = fp32_to_fp16(1.0f);
  BlockQ5_K q5{};
  q5.d = q5.dmin = fp32_to_fp16(1.0f);
  std::memset(q5.scales, 0xff, sizeof q5.scales);  // every 6-bit scale and min = 63
  std::memset(q5.qs, 0xff, sizeof q5.qs);
  std::memset(q5.qh, 0xff, sizeof q5.qh);  // codes 31
  BlockQ4_K q4{};
  q4.d = q4.dmin = fp32_to_fp16(1.0f);
  std::memset(q4.scales, 0xff, sizeof q4.scales);
  std::memset(q4.qs, 0xff, sizeof q4.qs);  // codes 15
  const std::vector<float> x = all_127(QK_K);
  const double exact_q6 = 256.0 * 1 * -128 * -32 * 127, exact_q5 = 256.0 * (63 * 31 - 63) * 127,
               exact_q4 = 256.0 * (63 * 15 - 63) * 127;
  for (const MatvecKernels* k : {&matvec_kernels_ref(), &matvec_kernels_avx2(), &matvec_kernels_avx512()}) {
    if (!cpu_has(k->isa)) continue;
    const std::vector<BlockQ8Act> xq = quantize(*k, x);
    ASSERT_EQ(xq[0].d, 1.0f);
    EXPECT_EQ(k->dot_q6_k(&q6, xq.data(), QK_K), (float)exact_q6) << k->name;
    EXPECT_EQ(k->dot_q5_k(&q5, xq.data(), QK_K), (float)exact_q5) << k->name;
    EXPECT_EQ(k->dot_q4_k(&q4, xq.data(), QK_K), (float)exact_q4) << k->name;
  }
}

// ---- float-dot kernels ------------------------------------------------------------------------

class MatvecFloatDot : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MatvecFloatDot, RefWithinFp32RoundingBound) {
  const GgmlType t = GetParam();
  for (int64_t cols : kFloatCols) {
    const test::TestMatrix m = make_test_matrix(t, 5, cols, 500 + (uint32_t)cols);
    const std::vector<float> x = make_activations(cols, 600 + (uint32_t)cols);
    for (int64_t r = 0; r < m.rows; ++r) {
      const float y = matvec_kernels_ref().float_dot(t)(m.bytes.data() + r * m.row_bytes, x.data(), cols);
      const test::RowBounds rb = row_bounds(m, r, x.data());
      EXPECT_NEAR(y, rb.exact, fp32_rel_bound(t, cols) * rb.fp_scale) << "cols " << cols << " row " << r;
    }
  }
}

void expect_float_dot_matches_ref(const MatvecKernels& k, GgmlType t) {
  for (int64_t cols : kFloatCols) {
    const test::TestMatrix m = make_test_matrix(t, 5, cols, 700 + (uint32_t)cols);
    const std::vector<float> x = make_activations(cols, 800 + (uint32_t)cols);
    for (int64_t r = 0; r < m.rows; ++r) {
      const uint8_t* row = m.bytes.data() + r * m.row_bytes;
      const float want = matvec_kernels_ref().float_dot(t)(row, x.data(), cols);
      const float got = k.float_dot(t)(row, x.data(), cols);
      const double tol = kSimdVsRefFactor * fp32_rel_bound(t, cols) * row_bounds(m, r, x.data()).fp_scale;
      EXPECT_NEAR(got, want, tol) << k.name << " cols " << cols << " row " << r;
    }
  }
}

TEST_P(MatvecFloatDot, Avx2MatchesRef) {
  REQUIRE_ISA(Isa::avx2);
  expect_float_dot_matches_ref(matvec_kernels_avx2(), GetParam());
}

TEST_P(MatvecFloatDot, Avx512MatchesRef) {
  REQUIRE_ISA(Isa::avx512);
  expect_float_dot_matches_ref(matvec_kernels_avx512(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Types, MatvecFloatDot, ::testing::Values(GgmlType::F32, GgmlType::F16),
                         [](const auto& info) { return ggml_type_name((uint32_t)info.param); });

// ---- the tables themselves --------------------------------------------------------------------

TEST(MatvecKernelTables, EveryEntryFilledAndActiveFollowsIsa) {
  for (const MatvecKernels* k : {&matvec_kernels_ref(), &matvec_kernels_avx2(), &matvec_kernels_avx512(),
                                 &matvec_kernels_avx512_vnni()}) {
    EXPECT_NE(k->quantize_act, nullptr) << k->name;
    for (GgmlType t : kQuantTypes) EXPECT_NE(k->quant_dot(t), nullptr) << k->name;
    EXPECT_NE(k->float_dot(GgmlType::F32), nullptr) << k->name;
    EXPECT_NE(k->float_dot(GgmlType::F16), nullptr) << k->name;
    EXPECT_EQ(k->quant_dot(GgmlType::BF16), nullptr) << k->name;
    EXPECT_EQ(k->quant_dot(GgmlType::Q2_K), nullptr) << k->name;
    for (GgmlType t : kQuantTypes) EXPECT_EQ(k->packed_tile(t) != nullptr, has_packed_layout(t)) << k->name;
  }
  EXPECT_EQ(&matvec_kernels_for(Isa::scalar), &matvec_kernels_ref());
  EXPECT_EQ(&matvec_kernels_for(Isa::avx2), &matvec_kernels_avx2());
  // The avx512 tier takes the VNNI packed kernels where the CPU has them (the same bits).
  EXPECT_EQ(&matvec_kernels_for(Isa::avx512),
            cpu_has_avx512_vnni() ? &matvec_kernels_avx512_vnni() : &matvec_kernels_avx512());
  EXPECT_EQ(active_matvec_kernels().isa, active_isa());
}

}  // namespace
}  // namespace mpkv

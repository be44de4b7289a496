// Driver-level tests: matvec / matmul_rows for every supported type against a double-precision
// reference, batching, threading, each ISA variant through the whole driver, bad input, and the
// real model's blk.0.ffn_down.weight. Bounds and their derivation: see test_matvec_blocks.h.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "matvec/matvec.h"
#include "test_matvec_blocks.h"
#include "test_support.h"
#include "util/error.h"

namespace mpkv {
namespace {

using test::fp32_rel_bound;
using test::make_activations;
using test::make_test_matrix;
using test::row_bounds;
using test::TestMatrix;

// Variant vs _ref through the driver: same codes, different fp32 summation order (see
// test_matvec_kernels.cpp), so each side is within fp32_rel_bound and they differ by at most twice it.
constexpr double kSimdVsRefFactor = 2.0;

const GgmlType kAllTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                              GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_K, GgmlType::Q5_K,
                              GgmlType::Q6_K};

// y[r] of one vector against the bound for its row.
void expect_within_bound(const TestMatrix& m, const float* x, const float* y, const std::string& what) {
  for (int64_t r = 0; r < m.rows; ++r) {
    const test::RowBounds rb = row_bounds(m, r, x);
    const double bound = rb.act_bound + fp32_rel_bound(m.type, m.cols) * rb.fp_scale;
    ASSERT_LE(std::fabs(y[r] - rb.exact), bound) << what << " row " << r << " exact " << rb.exact;
  }
}

class MatvecDriver : public ::testing::TestWithParam<GgmlType> {};

// Odd row count, padded rows (row_bytes > packed size), two column counts per type.
TEST_P(MatvecDriver, MatvecWithinBound) {
  const GgmlType t = GetParam();
  const int block = ggml_type_info((uint32_t)t)->block_size;
  for (int64_t cols : {int64_t(512), int64_t(block == 256 ? 1536 : 96)}) {
    const TestMatrix m = make_test_matrix(t, 37, cols, 11 + (uint32_t)cols, /*pad=*/6);
    const std::vector<float> x = make_activations(cols, 12 + (uint32_t)cols);
    std::vector<float> y(m.rows, -1.0f);
    matvec(m.view(), x.data(), y.data());
    expect_within_bound(m, x.data(), y.data(), ggml_type_name((uint32_t)t) + " cols " + std::to_string(cols));
  }
}

// n = 1..5 vectors: each within its bound and bit-identical to a separate matvec call.
TEST_P(MatvecDriver, MatmulRowsEqualsSeparateMatvecs) {
  const GgmlType t = GetParam();
  const TestMatrix m = make_test_matrix(t, 23, 512, 21);
  for (int n = 1; n <= 5; ++n) {
    std::vector<float> x;
    for (int v = 0; v < n; ++v) {
      const std::vector<float> xv = make_activations(m.cols, 100 * n + v);
      x.insert(x.end(), xv.begin(), xv.end());
    }
    std::vector<float> y((size_t)n * m.rows, -1.0f);
    matmul_rows(m.view(), x.data(), y.data(), n);
    for (int v = 0; v < n; ++v) {
      std::vector<float> y1(m.rows);
      matvec(m.view(), x.data() + (size_t)v * m.cols, y1.data());
      for (int64_t r = 0; r < m.rows; ++r) {
        ASSERT_EQ(y[(size_t)v * m.rows + r], y1[r]) << "n " << n << " vector " << v << " row " << r;
      }
      expect_within_bound(m, x.data() + (size_t)v * m.cols, y.data() + (size_t)v * m.rows,
                          "n " + std::to_string(n) + " vector " + std::to_string(v));
    }
  }
}

// Rows are independent and each is done by one thread: 1 and 2 threads agree bit for bit. The
// matrix is large enough (> 64 KiB) to take the parallel path.
TEST_P(MatvecDriver, ThreadCountDoesNotChangeResults) {
  const GgmlType t = GetParam();
  const TestMatrix m = make_test_matrix(t, 301, 1536, 31);
  ASSERT_GE(m.rows * m.row_bytes, size_t(64 * 1024));
  const std::vector<float> x = make_activations(m.cols, 32);
  const int saved = omp_get_max_threads();
  std::vector<float> y1(m.rows), y2(m.rows);
  omp_set_num_threads(1);
  matvec(m.view(), x.data(), y1.data());
  omp_set_num_threads(2);
  matvec(m.view(), x.data(), y2.data());
  omp_set_num_threads(saved);
  for (int64_t r = 0; r < m.rows; ++r) ASSERT_EQ(y1[r], y2[r]) << "row " << r;
  expect_within_bound(m, x.data(), y2.data(), "2 threads");
}

// The weight prefetch (speed only) changes no result: every prefetch distance, from none to past
// the end of the matrix, gives bit for bit what no prefetch gives, for one row and a batch of 9
// (two activation panels' worth of tiles: 4 + 4 + 1).
TEST_P(MatvecDriver, PrefetchDistanceDoesNotChangeResults) {
  const GgmlType t = GetParam();
  const TestMatrix m = make_test_matrix(t, 301, 1536, 61);
  constexpr int kN = 9;
  std::vector<float> x;
  for (int v = 0; v < kN; ++v) {
    const std::vector<float> xv = make_activations(m.cols, 600 + v);
    x.insert(x.end(), xv.begin(), xv.end());
  }
  const int saved = matvec_prefetch_bytes();
  std::vector<float> ref((size_t)kN * m.rows), y(ref.size());
  set_matvec_prefetch_bytes(0);
  matmul_rows(m.view(), x.data(), ref.data(), kN);
  for (int bytes : {64, 100, 2048, (int)std::min<size_t>(m.rows * m.row_bytes, kMaxPrefetchBytes), kMaxPrefetchBytes}) {
    set_matvec_prefetch_bytes(bytes);
    std::fill(y.begin(), y.end(), -1.0f);
    matmul_rows(m.view(), x.data(), y.data(), kN);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref[i]) << "prefetch " << bytes << " element " << i;
  }
  set_matvec_prefetch_bytes(saved);
  expect_within_bound(m, x.data(), ref.data(), "no prefetch");
}

// Batch and thread invariance (docs/numerics.md: greedy output must not depend on -t or on the batch a
// sequence decodes in): each of 17 activation rows multiplied alone at 1 thread is the reference;
// every batch of 2..17 rows (a window sliding over the 17, so a row sits at every tile position) at
// 1, 2 and 3 threads must reproduce it bit for bit. 301 x 1536 takes the parallel path.
TEST_P(MatvecDriver, RowResultIndependentOfBatchAndThreads) {
  const GgmlType t = GetParam();
  const TestMatrix m = make_test_matrix(t, 301, 1536, 51);
  constexpr int kRows = 17;
  std::vector<float> x;
  for (int v = 0; v < 2 * kRows; ++v) {
    const std::vector<float> xv = make_activations(m.cols, 500 + v);
    x.insert(x.end(), xv.begin(), xv.end());
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> alone((size_t)2 * kRows * m.rows);
  for (int v = 0; v < 2 * kRows; ++v) matvec(m.view(), x.data() + (size_t)v * m.cols, alone.data() + (size_t)v * m.rows);
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (int n = 2; n <= kRows; ++n) {
      const int first = n % kRows;  // where the window starts
      std::vector<float> y((size_t)n * m.rows);
      matmul_rows(m.view(), x.data() + (size_t)first * m.cols, y.data(), n);
      for (int v = 0; v < n; ++v) {
        for (int64_t r = 0; r < m.rows; ++r) {
          ASSERT_EQ(y[(size_t)v * m.rows + r], alone[(size_t)(first + v) * m.rows + r])
              << "batch " << n << " threads " << threads << " vector " << v << " row " << r;
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

// Every tile shape of every kernel table this CPU runs equals the table's single-row dot, bit for bit.
TEST_P(MatvecDriver, EveryTileShapeEqualsTheRowDot) {
  const GgmlType t = GetParam();
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if ((int)best_isa() < (int)isa) continue;
    const MatvecKernels& k = matvec_kernels_for(isa);
    const QuantTileFn tile = k.quant_tile(t);
    if (!tile) GTEST_SKIP() << ggml_type_name((uint32_t)t) << " has no integer-dot tile";
    const int64_t cols = test::is_k_quant_type(t) ? 768 : 544;  // 3 super-blocks / 17 blocks
    const TestMatrix m = make_test_matrix(t, kQuantTileMax, cols, 61, /*pad=*/6);
    const int64_t nb = m.cols / kActBlock;
    std::vector<BlockQ8Act> xq((size_t)kQuantTileMax * nb);
    for (int v = 0; v < kQuantTileMax; ++v) {
      const std::vector<float> xv = make_activations(m.cols, 70 + v);
      k.quantize_act(xv.data(), xq.data() + (size_t)v * nb, m.cols);
    }
    const WeightMatrix w = m.view();
    for (int nr = 1; nr <= kQuantTileMax; ++nr) {
      for (int nv = 1; nv <= kQuantTileMax; ++nv) {
        std::vector<float> y((size_t)nv * 8, -1.0f);
        tile(w.data, w.row_bytes, nr, xq.data(), (size_t)nb, nv, m.cols, y.data(), 8);
        for (int v = 0; v < nv; ++v) {
          for (int r = 0; r < nr; ++r) {
            const float want = k.quant_dot(t)(w.data + (size_t)r * w.row_bytes, xq.data() + (size_t)v * nb, m.cols);
            ASSERT_EQ(y[(size_t)v * 8 + r], want) << k.name << " tile " << nr << "x" << nv << " row " << r << " act " << v;
          }
        }
      }
    }
  }
}

void expect_variant_matches_ref(const MatvecKernels& k, GgmlType t) {
  const TestMatrix m = make_test_matrix(t, 45, 768, 41);
  const int n = 3;
  std::vector<float> x;
  for (int v = 0; v < n; ++v) {
    const std::vector<float> xv = make_activations(m.cols, 42 + v);
    x.insert(x.end(), xv.begin(), xv.end());
  }
  std::vector<float> want((size_t)n * m.rows), got((size_t)n * m.rows);
  matmul_rows_with(matvec_kernels_ref(), m.view(), x.data(), want.data(), n);
  matmul_rows_with(k, m.view(), x.data(), got.data(), n);
  for (int v = 0; v < n; ++v) {
    for (int64_t r = 0; r < m.rows; ++r) {
      const double tol =
          kSimdVsRefFactor * fp32_rel_bound(t, m.cols) * row_bounds(m, r, x.data() + (size_t)v * m.cols).fp_scale;
      ASSERT_NEAR(got[(size_t)v * m.rows + r], want[(size_t)v * m.rows + r], tol)
          << k.name << " vector " << v << " row " << r;
    }
  }
}

TEST_P(MatvecDriver, Avx2DriverMatchesRefDriver) {
  if ((int)best_isa() < (int)Isa::avx2) GTEST_SKIP() << "this CPU lacks AVX2";
  expect_variant_matches_ref(matvec_kernels_avx2(), GetParam());
}

TEST_P(MatvecDriver, Avx512DriverMatchesRefDriver) {
  if ((int)best_isa() < (int)Isa::avx512) {
    GTEST_SKIP() << "this CPU lacks AVX-512 (best: " << isa_name(best_isa()) << "); the variant compiles but cannot run here";
  }
  expect_variant_matches_ref(matvec_kernels_avx512(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Types, MatvecDriver, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return ggml_type_name((uint32_t)info.param); });

// matmul_rows_shared (Q, K, V in one pool job): each output equals its own matmul_rows bit for bit,
// at 1, 2 and 3 threads, for n = 1 and 5, with mixed integer-dot types (grouped), with a float
// type among them (done one by one), and with matrices small enough to stay on one thread.
TEST(MatvecDriverShared, EachOutputEqualsItsOwnMatmul) {
  const int saved = omp_get_max_threads();
  const int64_t cols = 768;
  for (const std::vector<GgmlType>& types : std::vector<std::vector<GgmlType>>{
           {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K}, {GgmlType::Q4_0, GgmlType::F16}}) {
    for (int64_t rows0 : {3, 301}) {
      std::vector<TestMatrix> ms;
      for (size_t i = 0; i < types.size(); ++i) ms.push_back(make_test_matrix(types[i], rows0 + 64 * (int64_t)i, cols, 70 + (uint32_t)i));
      for (int n : {1, 5}) {
        std::vector<float> x;
        for (int v = 0; v < n; ++v) {
          const std::vector<float> xv = make_activations(cols, 900 + v);
          x.insert(x.end(), xv.begin(), xv.end());
        }
        omp_set_num_threads(1);
        std::vector<std::vector<float>> alone(ms.size());
        for (size_t i = 0; i < ms.size(); ++i) {
          alone[i].resize((size_t)n * ms[i].rows);
          matmul_rows(ms[i].view(), x.data(), alone[i].data(), n);
        }
        for (int threads : {1, 2, 3}) {
          omp_set_num_threads(threads);
          std::vector<WeightMatrix> ws;
          std::vector<std::vector<float>> ys(ms.size());
          for (size_t i = 0; i < ms.size(); ++i) {
            ws.push_back(ms[i].view());
            ys[i].assign((size_t)n * ms[i].rows, -1.0f);
          }
          if (ms.size() == 3)
            matmul_rows_shared({{&ws[0], ys[0].data()}, {&ws[1], ys[1].data()}, {&ws[2], ys[2].data()}}, x.data(), n);
          else
            matmul_rows_shared({{&ws[0], ys[0].data()}, {&ws[1], ys[1].data()}}, x.data(), n);
          for (size_t i = 0; i < ms.size(); ++i)
            for (size_t e = 0; e < ys[i].size(); ++e)
              ASSERT_EQ(ys[i][e], alone[i][e]) << ggml_type_name((uint32_t)types[i]) << " rows " << ms[i].rows << " n " << n
                                               << " threads " << threads << " element " << e;
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(MatvecDriverShared, BadCallsAreInternalErrors) {
  const TestMatrix a = make_test_matrix(GgmlType::Q4_1, 8, 64, 1), b = make_test_matrix(GgmlType::Q4_1, 8, 64, 2);
  const WeightMatrix wa = a.view(), wb = b.view();
  const std::vector<float> x(64, 1.0f);
  std::vector<float> y(8);
  EXPECT_THROW(matmul_rows_shared({{&wa, y.data()}, {nullptr, y.data()}}, x.data(), 1), InternalError);
  EXPECT_THROW(matmul_rows_shared({{&wa, y.data()}, {&wb, nullptr}}, x.data(), 1), InternalError);
  EXPECT_THROW(matmul_rows_shared({{&wa, y.data()}}, nullptr, 1), InternalError);
  EXPECT_THROW(matmul_rows_shared({{&wa, y.data()}}, x.data(), -1), InternalError);
  EXPECT_THROW(matmul_rows_shared({}, x.data(), 1), InternalError);
}

TEST(MatvecDriverFallback, SlowPathIsExactlyBf16) {
  for (GgmlType t : kAllTypes) {
    EXPECT_EQ(matvec_uses_dequant_fallback(t), t == GgmlType::BF16) << ggml_type_name((uint32_t)t);
  }
}

// ---- bad input ------------------------------------------------------------------------------

std::string error_of(const WeightMatrix& w, int n = 1) {
  std::vector<float> x(4096, 1.0f), y(4096 * 8);
  try {
    matmul_rows(w, x.data(), y.data(), n);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MatvecDriverErrors, UnsupportedTypeIsNamed) {
  std::vector<uint8_t> buf(4096);
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::Q8_1, GgmlType::I32}) {
    const std::string name = ggml_type_name((uint32_t)t);
    const std::string msg = error_of(WeightMatrix{t, 2, 256, buf.data(), 1024});
    EXPECT_NE(msg.find(name), std::string::npos) << "message: '" << msg << "' should name " << name;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
  }
  const std::string msg = error_of(WeightMatrix{static_cast<GgmlType>(99), 2, 32, buf.data(), 64});
  EXPECT_NE(msg.find("99"), std::string::npos) << msg;
}

TEST(MatvecDriverErrors, BadShapesAreRejected) {
  std::vector<uint8_t> buf(4096);
  EXPECT_NE(error_of(WeightMatrix{GgmlType::Q4_1, 2, 48, buf.data(), 40}).find("multiple of its block size 32"),
            std::string::npos);
  EXPECT_NE(error_of(WeightMatrix{GgmlType::Q6_K, 1, 128, buf.data(), 210}).find("block size 256"), std::string::npos);
  EXPECT_NE(error_of(WeightMatrix{GgmlType::Q4_1, 2, 64, buf.data(), 39}).find("row_bytes 39"), std::string::npos);
  EXPECT_NE(error_of(WeightMatrix{GgmlType::F32, 2, 0, buf.data(), 0}).find("shape"), std::string::npos);
  EXPECT_NE(error_of(WeightMatrix{GgmlType::F32, -1, 4, buf.data(), 16}).find("shape"), std::string::npos);
  EXPECT_NE(error_of(WeightMatrix{GgmlType::Q8_0, 2, 32, nullptr, 34}).find("null"), std::string::npos);
  // A negative vector count comes from mpkv's own caller, never from a file: a bug.
  std::vector<float> x(64, 1.0f), y(8);
  EXPECT_THROW(matmul_rows(WeightMatrix{GgmlType::Q8_0, 2, 32, buf.data(), 34}, x.data(), y.data(), -1), InternalError);
}

TEST(MatvecDriverErrors, PrefetchDistanceOutsideItsRangeIsAnErrorAndChangesNothing) {
  const int saved = matvec_prefetch_bytes();
  EXPECT_THROW(set_matvec_prefetch_bytes(-1), Error);
  EXPECT_THROW(set_matvec_prefetch_bytes(kMaxPrefetchBytes + 1), Error);
  EXPECT_EQ(matvec_prefetch_bytes(), saved);
}

// MPKV_MATVEC_PREFETCH_BYTES is read on first use; each child is a fresh process (threadsafe
// death-test style re-runs the binary), so the variable it sets is the one read.
int prefetch_bytes_from_env(const char* value) {
  setenv("MPKV_MATVEC_PREFETCH_BYTES", value, 1);
  try {
    return matvec_prefetch_bytes();
  } catch (const Error& e) {
    return std::string(e.what()).find("MPKV_MATVEC_PREFETCH_BYTES") != std::string::npos ? -1 : -2;
  }
}

TEST(MatvecPrefetchDeathTest, EnvironmentSetsTheDistanceAndBadValuesAreErrors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(prefetch_bytes_from_env("4096") == 4096 ? 0 : 1), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(std::exit(prefetch_bytes_from_env("0") == 0 ? 0 : 1), testing::ExitedWithCode(0), "");
  for (const char* bad : {"", "2k", "-1", "1048577", "12 "}) {
    EXPECT_EXIT(std::exit(prefetch_bytes_from_env(bad) == -1 ? 0 : 1), testing::ExitedWithCode(0), "") << "'" << bad << "'";
  }
}

TEST(MatvecDriverErrors, EmptyWorkTouchesNothing) {
  std::vector<uint8_t> buf(64);
  std::vector<float> x(32, 1.0f), y(4, 7.0f);
  matmul_rows(WeightMatrix{GgmlType::Q8_0, 2, 32, buf.data(), 34}, x.data(), y.data(), 0);
  matvec(WeightMatrix{GgmlType::Q8_0, 0, 32, buf.data(), 34}, x.data(), y.data());
  for (float v : y) EXPECT_EQ(v, 7.0f);
}

// ---- the real model -------------------------------------------------------------------------

// y = W x for one tensor of a real model against the double reference from hand-decoded blocks
// (dequantize_row for the K-quants), with the same bound as the synthetic tests.
void expect_real_tensor_within_bound(const GgufTensorInfo& ti) {
  ASSERT_EQ(ti.dims.size(), 2u);
  TestMatrix m;
  m.type = ti.type;
  m.cols = ti.dims[0];
  m.rows = ti.dims[1];
  m.row_bytes = ggml_row_bytes(m.type, m.cols);
  ASSERT_EQ(m.row_bytes * m.rows, ti.n_bytes);
  m.w.resize((size_t)m.rows * m.cols);
  m.mag.resize(m.w.size());
  for (int64_t r = 0; r < m.rows; ++r) {
    test::decode_row(m.type, ti.data + r * m.row_bytes, m.cols, m.w.data() + r * m.cols, m.mag.data() + r * m.cols);
  }
  const WeightMatrix w{m.type, m.rows, m.cols, ti.data, m.row_bytes};
  const std::vector<float> x = make_activations(m.cols, 2024);
  std::vector<float> y(m.rows);
  matvec(w, x.data(), y.data());
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < m.rows; ++r) {
    const test::RowBounds rb = row_bounds(m, r, x.data());
    const double bound = rb.act_bound + fp32_rel_bound(m.type, m.cols) * rb.fp_scale;
    ASSERT_LE(std::fabs(y[r] - rb.exact), bound) << ti.name << " row " << r;
    err2 += (y[r] - rb.exact) * (y[r] - rb.exact);
    ref2 += rb.exact * rb.exact;
  }
  std::printf("  %s [%lld, %lld] %s: relative L2 error of y %.2e (activation quantization)\n", ti.name.c_str(),
              (long long)m.rows, (long long)m.cols, ggml_type_name((uint32_t)m.type).c_str(), std::sqrt(err2 / ref2));
}

// blk.0.ffn_down.weight ([576, 1536], Q4_1 in the default model).
TEST(MatvecRealModel, FfnDownLayer0WithinBound) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "default model not found (set MPKV_MODEL or run scripts/ to fetch it)";
  GgufReader reader(path);
  expect_real_tensor_within_bound(reader.tensor("blk.0.ffn_down.weight"));
}

// Gemma-3-270M Q4_K_M: its K-quant tensors (attn_output Q4_K [640, 1024]; ffn_down Q4_K or Q6_K
// [640, 2048] depending on the layer), the first of each kind.
TEST(MatvecRealModel, GemmaKQuantTensorsWithinBound) {
  const std::string path = test::source_path("models/gemma-3-270m-q4_k_m.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "Gemma-3-270M not found at " << path << " (scripts/get_model.sh gemma3-270m)";
  GgufReader reader(path);
  expect_real_tensor_within_bound(reader.tensor("blk.0.attn_output.weight"));
  bool seen_q4k = false, seen_q6k = false;
  for (int layer = 0; layer < 64 && !(seen_q4k && seen_q6k); ++layer) {
    const std::string name = "blk." + std::to_string(layer) + ".ffn_down.weight";
    const GgufTensorInfo* found = reader.find_tensor(name);
    if (!found) break;
    const GgufTensorInfo& ti = *found;
    bool& seen = ti.type == GgmlType::Q6_K ? seen_q6k : seen_q4k;
    if (seen || !test::is_k_quant_type(ti.type)) continue;
    seen = true;
    expect_real_tensor_within_bound(ti);
  }
  EXPECT_TRUE(seen_q4k && seen_q6k) << "expected Q4_K and Q6_K ffn_down tensors in " << path;
}

}  // namespace
}  // namespace mpkv

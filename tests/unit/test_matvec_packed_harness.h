// Shared checks of the packed-weight tests (test_matvec_packed.cpp, test_matvec_packed_gemma.cpp):
// the kernel tables this CPU can run, activation rows, and the two checks every packed layout gets:
// every table, thread count and batch width gives, through the whole driver, exactly the layout's
// per-pair arithmetic (computed by the test from the GGUF blocks), and the result is within the
// error bound of the exact product.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <initializer_list>
#include <memory>
#include <vector>

#include "matvec/matvec.h"
#include "matvec/matvec_packed.h"
#include "test_matvec_blocks.h"

namespace mpkv::test {

// The kernel tables this CPU can run (the VNNI one is the avx512 tier's on a VNNI CPU).
inline std::vector<const MatvecKernels*> runnable_packed_tables() {
  std::vector<const MatvecKernels*> t = {&matvec_kernels_ref()};
  if ((int)best_isa() >= (int)Isa::avx2) t.push_back(&matvec_kernels_avx2());
  if ((int)best_isa() >= (int)Isa::avx512) t.push_back(&matvec_kernels_avx512());
  if ((int)best_isa() >= (int)Isa::avx512 && cpu_has_avx512_vnni()) t.push_back(&matvec_kernels_avx512_vnni());
  return t;
}

// n activation rows of `cols` values (make_activations with seeds seed, seed + 1, ...), row-major.
inline std::vector<float> activation_rows(int64_t cols, int n, uint32_t seed) {
  std::vector<float> x;
  for (int v = 0; v < n; ++v) {
    const std::vector<float> xv = make_activations(cols, seed + (uint32_t)v);
    x.insert(x.end(), xv.begin(), xv.end());
  }
  return x;
}

// The pair arithmetic of a packed layout: row r of m against activation row xq (cols / 32 blocks).
using PairSpecFn = float (*)(const TestMatrix& m, int64_t r, const BlockQ8Act* xq);

// For each rows x cols shape and batch width n (tails of every kernel tile width, more than one
// activation panel), each runnable table and 1 / 2 / 3 threads: matmul_rows_with on the packed
// matrix equals `spec` bit for bit.
inline void expect_every_table_gives_pair_spec(GgmlType t, PairSpecFn spec, std::initializer_list<int64_t> row_counts,
                                               std::initializer_list<int64_t> col_counts, uint32_t seed) {
  const int saved = omp_get_max_threads();
  for (int64_t rows : row_counts) {
    for (int64_t cols : col_counts) {
      const TestMatrix m = make_test_matrix(t, rows, cols, seed + (uint32_t)(rows * cols), /*pad=*/4);
      const std::unique_ptr<PackedMatrix> p = pack_weight_matrix(m.view());
      ASSERT_NE(p, nullptr);
      WeightMatrix w = m.view();
      w.packed = p.get();
      for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 70}) {
        const std::vector<float> x = activation_rows(cols, n, 100 * n);
        std::vector<BlockQ8Act> xq((size_t)n * (cols / 32));
        for (int v = 0; v < n; ++v)
          matvec_kernels_ref().quantize_act(x.data() + (size_t)v * cols, xq.data() + (size_t)v * (cols / 32), cols);
        std::vector<float> want((size_t)n * rows);
        for (int v = 0; v < n; ++v)
          for (int64_t r = 0; r < rows; ++r) want[(size_t)v * rows + r] = spec(m, r, xq.data() + (size_t)v * (cols / 32));
        for (const MatvecKernels* k : runnable_packed_tables()) {
          for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            std::vector<float> y((size_t)n * rows, -1.0f);
            matmul_rows_with(*k, w, x.data(), y.data(), n);
            for (size_t i = 0; i < y.size(); ++i)
              ASSERT_EQ(y[i], want[i]) << k->name << " rows " << rows << " cols " << cols << " n " << n << " threads "
                                       << threads << " activation row " << i / rows << " row " << i % rows;
          }
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

// A packed rows x cols matrix of type t times one activation row is within the error bound of the
// exact product (test_matvec_blocks.h).
inline void expect_packed_within_error_bound(GgmlType t, int64_t rows, int64_t cols) {
  const TestMatrix m = make_test_matrix(t, rows, cols, 5);
  const std::unique_ptr<PackedMatrix> p = pack_weight_matrix(m.view());
  ASSERT_NE(p, nullptr);
  WeightMatrix w = m.view();
  w.packed = p.get();
  const std::vector<float> x = make_activations(m.cols, 6);
  std::vector<float> y(m.rows);
  matvec(w, x.data(), y.data());
  for (int64_t r = 0; r < m.rows; ++r) {
    const RowBounds rb = row_bounds(m, r, x.data());
    ASSERT_LE(std::fabs(y[r] - rb.exact), rb.act_bound + fp32_rel_bound(m.type, m.cols) * rb.fp_scale) << "row " << r;
  }
}

}  // namespace mpkv::test

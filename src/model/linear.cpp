#include "model/linear.h"

#include "gguf/dequant.h"
#include "util/thread_pool.h"

namespace mpkv {

void dequantize_matrix(const WeightMatrix& w, float* out) {
  parallel_for(w.rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) dequantize_row(w.type, w.data + r * w.row_bytes, out + r * w.cols, w.cols);
  });
}

void linear_forward(const WeightMatrix& w, const float* x, float* y, int n) { matmul_rows(w, x, y, n); }

void linear_forward_shared(std::initializer_list<MatmulTarget> targets, const float* x, int n) {
  matmul_rows_shared(targets, x, n);
}

}  // namespace mpkv

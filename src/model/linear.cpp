#include "model/linear.h"

#include "gguf/dequant.h"

namespace mpkv {

void dequantize_matrix(const WeightMatrix& w, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w.type, w.data + r * w.row_bytes, out + r * w.cols, w.cols);
}

void linear_forward(const WeightMatrix& w, const float* x, float* y, int n) { matmul_rows(w, x, y, n); }

}  // namespace mpkv

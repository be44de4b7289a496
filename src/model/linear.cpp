#include "model/linear.h"

#include <cblas.h>

#include "gguf/dequant.h"

namespace mpkv {

void dequantize_matrix(const WeightMatrix& w, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w.type, w.data + r * w.row_bytes, out + r * w.cols, w.cols);
}

void linear_forward(const WeightMatrix& w, const float* x, float* y, int n, std::vector<float>& scratch) {
  if (n <= kLinearSmallBatch) {
    matmul_rows(w, x, y, n);
    return;
  }
  const size_t need = (size_t)w.rows * (size_t)w.cols;
  if (scratch.size() < need) scratch.resize(need);
  dequantize_matrix(w, scratch.data());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)w.rows, (int)w.cols, 1.0f, x, (int)w.cols,
              scratch.data(), (int)w.cols, 0.0f, y, (int)w.rows);
}

}  // namespace mpkv

#include "model/linear.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "gguf/dequant.h"

extern "C" void openblas_set_num_threads(int);

namespace mpkv {

namespace {
// OpenBLAS runs single-threaded inside our OpenMP regions (see linear_forward).
void keep_openblas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}
}  // namespace

void dequantize_matrix(const WeightMatrix& w, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w.type, w.data + r * w.row_bytes, out + r * w.cols, w.cols);
}

void linear_forward(const WeightMatrix& w, const float* x, float* y, int n, std::vector<float>& scratch) {
  if (n <= kLinearSmallBatch) {
    matmul_rows(w, x, y, n);
    return;
  }
  keep_openblas_single_threaded();
  const size_t need = (size_t)w.rows * (size_t)w.cols;
  if (scratch.size() < need) scratch.resize(need);
  // Each OpenMP thread dequantizes its own slice of weight rows and multiplies it with a
  // single-threaded sgemm: y[:, r0:r1] = x W[r0:r1]^T. OpenBLAS is kept at one thread
  // (set_num_threads): its own worker threads next to OpenMP's spinning ones made prefill several
  // times slower on 2 cores.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (w.rows + nt - 1) / nt;
    const int64_t r0 = std::min<int64_t>(w.rows, t * per), r1 = std::min<int64_t>(w.rows, r0 + per);
    if (r1 > r0) {
      float* wf = scratch.data() + r0 * w.cols;
      for (int64_t r = r0; r < r1; ++r) dequantize_row(w.type, w.data + r * w.row_bytes, wf + (r - r0) * w.cols, w.cols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, (int)(r1 - r0), (int)w.cols, 1.0f, x, (int)w.cols, wf,
                  (int)w.cols, 0.0f, y + r0, (int)w.rows);
    }
  }
}

}  // namespace mpkv

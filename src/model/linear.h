// y = x W^T for a weight in its GGUF encoding, for any number of rows (decode of a batch or a
// prefill): the matvec driver's tile kernels, so every row's result is independent of how many
// rows share the call and of the thread count (matvec.h). There is no float-GEMM path: OpenBLAS
// sgemm's per-row result depended on M and on the per-thread slice of weight rows, which made greedy
// output change with -t and with the batch a sequence decoded in.
#pragma once
#include "matvec/matvec.h"

namespace mpkv {

// x: [n, w.cols], y: [n, w.rows].
void linear_forward(const WeightMatrix& w, const float* x, float* y, int n);

// Several weights applied to the same x (Q, K and V; gate and up): one thread-pool job for all of
// them, each y exactly what linear_forward gives (matmul_rows_shared).
void linear_forward_shared(std::initializer_list<MatmulTarget> targets, const float* x, int n);

// Dequantizes the whole matrix to out [rows, cols] (parallel over rows).
void dequantize_matrix(const WeightMatrix& w, float* out);

}  // namespace mpkv

// y = x W^T for a weight in its GGUF encoding, choosing the kernel by batch size:
// a few rows (decode) use the quantized matrix-vector kernels; many rows (prefill) dequantize W
// to float32 once and call OpenBLAS sgemm.
#pragma once
#include <vector>

#include "matvec/matvec.h"

namespace mpkv {

// Row counts up to this use matmul_rows (weights read once for all rows, activations quantized
// like llama.cpp's); above it the sgemm path wins (measured on SmolLM2 shapes, 2 threads).
constexpr int kLinearSmallBatch = 8;

// x: [n, w.cols], y: [n, w.rows]. scratch grows to w.rows * w.cols floats on the sgemm path.
void linear_forward(const WeightMatrix& w, const float* x, float* y, int n, std::vector<float>& scratch);

// Dequantizes the whole matrix to out [rows, cols] (parallel over rows).
void dequantize_matrix(const WeightMatrix& w, float* out);

}  // namespace mpkv

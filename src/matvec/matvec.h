// Weight matrix times activation vector(s): y = W x, the decode path's matrix products.
//
// Weights stay in their GGUF encoding. Per type:
//   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, fast path: x quantized once to 8-bit blocks of 32, integer dot per
//   Q4_K, Q5_K, Q6_K              block (see matvec_kernels.h); y carries the activation-quantization
//                                 error, |y - W x| <= sum_blocks (max|x_b| / 254) * sum_{j in b} |w_j|
//                                 (+ fp32 rounding).
//   F32, F16                      float dot product (exact up to fp32 rounding).
//   BF16                          SLOW PATH: each row is dequantized into a thread-local fp32 buffer
//                                 and then float-dotted; about 3-10x slower than the integer paths.
//   anything else                 Error naming the type.
// A matrix with a packed copy (WeightMatrix::packed, matvec_packed.h) runs the packed kernel instead
// of the GGUF-layout tile: same bound, its own fixed per-pair arithmetic.
// Rows are independent: chunks of rows go to the thread pool (util/thread_pool.h; the caller sets
// the thread count with omp_set_num_threads, i.e. `mpkv -t`). Batch- and thread-invariant: y for one activation
// row is bit for bit the same whatever other rows are multiplied in the same call and however many
// threads run (the integer-dot types through QuantTileFn, the others one dot per row).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "gguf/ggml_types.h"
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed.h"

namespace mpkv {

// A weight matrix [rows, cols] as stored in GGUF (ggml dims {cols, rows}), row-major: row r starts
// at data + r * row_bytes and holds cols elements in `type`'s block layout. cols must be a multiple
// of the type's block size and row_bytes >= ggml_row_bytes(type, cols). The data is not owned.
// `packed`, when set, is the same matrix repacked (pack_weight_matrix, matvec_packed.h; not owned):
// the integer-dot path then runs the packed kernel, whose per-pair arithmetic is the packed
// layout's (matvec_packed.h), for every n and thread count.
struct WeightMatrix {
  GgmlType type;
  int64_t rows, cols;
  const uint8_t* data;
  size_t row_bytes;
  const PackedMatrix* packed = nullptr;
};

// y[rows] = W x[cols].
void matvec(const WeightMatrix& w, const float* x, float* y);

// n vectors at once (decode of several sequences, or a prefill): x is [n, cols], y is [n, rows], both
// row-major. Each x is quantized once; each weight block is decoded once per tile of activation rows.
// Results equal n separate matvec calls bit for bit. n == 0 does nothing.
void matmul_rows(const WeightMatrix& w, const float* x, float* y, int n);

// The same with an explicit kernel table (tests run each ISA variant through the full driver).
void matmul_rows_with(const MatvecKernels& k, const WeightMatrix& w, const float* x, float* y, int n);

// One output of matmul_rows_shared: y [n, w->rows] = x W^T.
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;
};

// Several matrices applied to the same x [n, cols] (Q, K and V; gate and up). When all take the
// integer-dot path, x is quantized once and the rows of all matrices go to the threads as one job,
// so a decode step waits for its threads once instead of once per matrix. Each y gets bit for bit
// what matmul_rows(*w, x, y, n) gives.
void matmul_rows_shared(std::initializer_list<MatmulTarget> targets, const float* x, int n);
void matmul_rows_shared_with(const MatvecKernels& k, std::initializer_list<MatmulTarget> targets, const float* x, int n);

// Throws Error unless w can be multiplied (supported type, shape consistent with row_bytes).
void check_weight_matrix(const WeightMatrix& w);

// Bytes ahead of the weight tile being multiplied that the integer-dot path prefetches (speed only:
// no result depends on it). Starts as MPKV_MATVEC_PREFETCH_BYTES if set (an integer in
// [0, kMaxPrefetchBytes], 0 = no prefetch; anything else is an Error), else 2048; benchmarks and
// tests change it with set_matvec_prefetch_bytes (Error outside that range). The packed Q4_1 / Q8_0
// SIMD kernels prefetch the next group themselves whatever this says (packed_kernel_prefetches).
constexpr int kMaxPrefetchBytes = 1 << 20;
int matvec_prefetch_bytes();
void set_matvec_prefetch_bytes(int bytes);

// True for the types served by the slow dequantize-then-dot path.
bool matvec_uses_dequant_fallback(GgmlType type);

}  // namespace mpkv

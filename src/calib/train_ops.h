// Forward and backward operations of the calibration ("training-style") pass, in float or double.
// Each backward is the exact transpose of its forward, written out plainly (scalar loops with
// OpenMP over rows; the matmuls go to OpenBLAS through gemm()). They are the reference and the
// implementation at once: they run ~1% of the pass's flops, the rest is in gemm.
// All matrices are row-major.
#pragma once
#include <cstdint>

#include "model/model_config.h"
#include "model/ops.h"

namespace mpkv::calib {

// C[m, n] = alpha * op(A) op(B) + beta * C, op = transpose when the flag is set (cblas_?gemm).
//   trans_a = false: A is [m, k] (lda); true: A is [k, m].
//   trans_b = false: B is [k, n] (ldb); true: B is [n, k].
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc);

// Threading: the calibration pass parallelises with OpenMP at a coarse grain (rows of a matmul,
// (head, query block) tasks of attention) and calls OpenBLAS single-threaded inside. Letting the
// pthread OpenBLAS spawn its own threads between OpenMP regions left libgomp's workers spinning
// against them: 64% of a 2-core profile was libgomp spin, and the pass ran 3-5x slower.
// Holds OpenBLAS at one thread for its lifetime, then restores the previous count.
class BlasSingleThread {
 public:
  BlasSingleThread();
  ~BlasSingleThread();
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;

 private:
  int saved_;
};

// gemm with trans_a = false, its m rows split into one contiguous slice per OpenMP thread, each a
// single-threaded gemm call (use under BlasSingleThread, outside any parallel region).
template <typename Real>
void gemm_rows_parallel(bool trans_b, int m, int n, int k, Real alpha, const Real* a, int lda, const Real* b, int ldb,
                        Real beta, Real* c, int ldc);

// y[i, :] = x[i, :] * r_i * w, r_i = 1 / sqrt(mean(x[i, :]^2) + eps); x, y [n, d]; inv_rms [n]
// receives r_i (what the backward needs). y may alias x.
template <typename Real>
void rmsnorm_forward(const Real* x, const Real* w, Real* y, Real* inv_rms, int n, int d, double eps);

// Given dy = dL/dy for the forward above, dx = r (w . dy) - x r^3 / d * sum_j(w_j dy_j x_j).
// accumulate: dx += that, else dx = that. dx may alias dy only when !accumulate.
template <typename Real>
void rmsnorm_backward(const Real* x, const Real* w, const Real* inv_rms, const Real* dy, Real* dx, int n, int d,
                      bool accumulate);

// Rotates x [n, n_heads, head_dim] in place as the engine's RoPE does (model/ops.h, RopeParams;
// docs/models.md "RoPE"): pair j (pairs as RopeStyle says) by theta_j = pos[i] * (inv_scale *
// inv_freq[j] * (1 - mix[j]) + inv_freq[j] * mix[j]), scaled by mscale, with the table's terms
// (rope_pair_table: frequency factors, linear / YaRN scaling, attention factor); pos[i] is the
// position times any positional-interpolation scale. direction -1 applies the transpose, mscale
// R(-theta): that is the backward, and with mscale 1 it also undoes a forward. Angles are computed
// in double whatever Real is.
template <typename Real>
void rope_rotate(Real* x, const double* pos, int n, int n_heads, int head_dim, RopeStyle style,
                 const RopePairTable& table, int direction);

// h = silu(g) * u elementwise, n elements.
template <typename Real>
void swiglu_forward(const Real* g, const Real* u, Real* h, int64_t n);

// From dh: dg = dh * u * silu'(g), du = dh * silu(g), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
// dg / du may alias nothing else.
template <typename Real>
void swiglu_backward(const Real* g, const Real* u, const Real* dh, Real* dg, Real* du, int64_t n);

// h = gelu(g) * u elementwise (GeGLU, gemma3), GELU's tanh approximation as the engine computes it
// (docs/gemma3.md): gelu(x) = 0.5 x (1 + tanh(a (x + c x^3))), a = sqrt(2 / pi), c = 0.044715.
template <typename Real>
void geglu_tanh_forward(const Real* g, const Real* u, Real* h, int64_t n);

// From dh: du = dh * gelu(g), dg = dh * u * gelu'(g),
// gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) a (1 + 3 c x^2), t = tanh(a (x + c x^3)).
template <typename Real>
void geglu_tanh_backward(const Real* g, const Real* u, const Real* dh, Real* dg, Real* du, int64_t n);

// The model's gated activation (SwiGLU or GeGLU) forward and backward, as above.
template <typename Real>
void gated_forward(FfnActivation act, const Real* g, const Real* u, Real* h, int64_t n);
template <typename Real>
void gated_backward(FfnActivation act, const Real* g, const Real* u, const Real* dh, Real* dg, Real* du, int64_t n);

}  // namespace mpkv::calib

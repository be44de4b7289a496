#include "calib/train_ops.h"

#include <cblas.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mpkv::calib {

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

BlasSingleThread::BlasSingleThread() : saved_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
BlasSingleThread::~BlasSingleThread() { openblas_set_num_threads(saved_); }

template <typename Real>
void gemm_rows_parallel(bool trans_b, int m, int n, int k, Real alpha, const Real* a, int lda, const Real* b, int ldb,
                        Real beta, Real* c, int ldc) {
  const int n_threads = std::max(1, std::min(omp_get_max_threads(), m / 16));
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
  for (int part = 0; part < n_threads; ++part) {
    const int r0 = (int)((int64_t)m * part / n_threads), r1 = (int)((int64_t)m * (part + 1) / n_threads);
    if (r1 > r0)
      gemm(false, trans_b, r1 - r0, n, k, alpha, a + (size_t)r0 * lda, lda, b, ldb, beta, c + (size_t)r0 * ldc, ldc);
  }
}

template <typename Real>
void rmsnorm_forward(const Real* x, const Real* w, Real* y, Real* inv_rms, int n, int d, double eps) {
#pragma omp parallel for if (n > 16)
  for (int i = 0; i < n; ++i) {
    const Real* xi = x + (size_t)i * d;
    Real* yi = y + (size_t)i * d;
    double ss = 0.0;
    for (int j = 0; j < d; ++j) ss += (double)xi[j] * xi[j];
    const Real r = (Real)(1.0 / std::sqrt(ss / d + eps));
    inv_rms[i] = r;
    for (int j = 0; j < d; ++j) yi[j] = xi[j] * r * w[j];
  }
}

template <typename Real>
void rmsnorm_backward(const Real* x, const Real* w, const Real* inv_rms, const Real* dy, Real* dx, int n, int d,
                      bool accumulate) {
#pragma omp parallel for if (n > 16)
  for (int i = 0; i < n; ++i) {
    const Real* xi = x + (size_t)i * d;
    const Real* dyi = dy + (size_t)i * d;
    Real* dxi = dx + (size_t)i * d;
    const double r = inv_rms[i];
    double dot = 0.0;  // sum_j w_j dy_j x_j
    for (int j = 0; j < d; ++j) dot += (double)w[j] * dyi[j] * xi[j];
    const Real c = (Real)(r * r * r * dot / d);
    for (int j = 0; j < d; ++j) {
      const Real g = (Real)r * w[j] * dyi[j] - xi[j] * c;
      dxi[j] = accumulate ? dxi[j] + g : g;
    }
  }
}

template <typename Real>
void rope_rotate(Real* x, const double* pos, int n, int n_heads, int head_dim, RopeStyle style,
                 const RopePairTable& table, int direction) {
  const int half = head_dim / 2;
  std::vector<double> rate(half);
  for (int j = 0; j < half; ++j)
    rate[j] = (double)table.inv_scale * table.inv_freq[j] * (1.0 - table.mix[j]) + (double)table.inv_freq[j] * table.mix[j];
  const double m = table.mscale;
#pragma omp parallel for if (n > 16)
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < half; ++j) {
      const double theta = pos[i] * rate[j];
      const Real c = (Real)(m * std::cos(theta)), s = (Real)(direction * m * std::sin(theta));
      const int a = style == RopeStyle::adjacent ? 2 * j : j;
      const int b = style == RopeStyle::adjacent ? 2 * j + 1 : j + half;
      for (int h = 0; h < n_heads; ++h) {
        Real* xh = x + ((size_t)i * n_heads + h) * head_dim;
        const Real x0 = xh[a], x1 = xh[b];
        xh[a] = x0 * c - x1 * s;
        xh[b] = x0 * s + x1 * c;
      }
    }
  }
}

template <typename Real>
void swiglu_forward(const Real* g, const Real* u, Real* h, int64_t n) {
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] / (Real(1) + std::exp(-g[i])) * u[i];
}

template <typename Real>
void swiglu_backward(const Real* g, const Real* u, const Real* dh, Real* dg, Real* du, int64_t n) {
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const Real s = Real(1) / (Real(1) + std::exp(-g[i]));
    const Real silu = g[i] * s;
    du[i] = dh[i] * silu;
    dg[i] = dh[i] * u[i] * s * (Real(1) + g[i] * (Real(1) - s));
  }
}

namespace {
constexpr double kGeluA = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;
}  // namespace

template <typename Real>
void geglu_tanh_forward(const Real* g, const Real* u, Real* h, int64_t n) {
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const Real x = g[i];
    h[i] = Real(0.5) * x * (Real(1) + std::tanh(Real(kGeluA) * x * (Real(1) + Real(kGeluC) * x * x))) * u[i];
  }
}

template <typename Real>
void geglu_tanh_backward(const Real* g, const Real* u, const Real* dh, Real* dg, Real* du, int64_t n) {
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const Real x = g[i];
    const Real t = std::tanh(Real(kGeluA) * x * (Real(1) + Real(kGeluC) * x * x));
    const Real gelu = Real(0.5) * x * (Real(1) + t);
    const Real dgelu =
        Real(0.5) * (Real(1) + t) + Real(0.5) * x * (Real(1) - t * t) * Real(kGeluA) * (Real(1) + Real(3 * kGeluC) * x * x);
    du[i] = dh[i] * gelu;
    dg[i] = dh[i] * u[i] * dgelu;
  }
}

template <typename Real>
void gated_forward(FfnActivation act, const Real* g, const Real* u, Real* h, int64_t n) {
  switch (act) {
    case FfnActivation::silu: return swiglu_forward(g, u, h, n);
    case FfnActivation::gelu_tanh: return geglu_tanh_forward(g, u, h, n);
  }
}

template <typename Real>
void gated_backward(FfnActivation act, const Real* g, const Real* u, const Real* dh, Real* dg, Real* du, int64_t n) {
  switch (act) {
    case FfnActivation::silu: return swiglu_backward(g, u, dh, dg, du, n);
    case FfnActivation::gelu_tanh: return geglu_tanh_backward(g, u, dh, dg, du, n);
  }
}

#define MPKV_INSTANTIATE(Real)                                                                                      \
  template void gemm_rows_parallel<Real>(bool, int, int, int, Real, const Real*, int, const Real*, int, Real, Real*, int); \
  template void rmsnorm_forward<Real>(const Real*, const Real*, Real*, Real*, int, int, double);                   \
  template void rmsnorm_backward<Real>(const Real*, const Real*, const Real*, const Real*, Real*, int, int, bool); \
  template void rope_rotate<Real>(Real*, const double*, int, int, int, RopeStyle, const RopePairTable&, int);        \
  template void swiglu_forward<Real>(const Real*, const Real*, Real*, int64_t);                                    \
  template void swiglu_backward<Real>(const Real*, const Real*, const Real*, Real*, Real*, int64_t);            \
  template void geglu_tanh_forward<Real>(const Real*, const Real*, Real*, int64_t);                                \
  template void geglu_tanh_backward<Real>(const Real*, const Real*, const Real*, Real*, Real*, int64_t);           \
  template void gated_forward<Real>(FfnActivation, const Real*, const Real*, Real*, int64_t);                      \
  template void gated_backward<Real>(FfnActivation, const Real*, const Real*, const Real*, Real*, Real*, int64_t);
MPKV_INSTANTIATE(float)
MPKV_INSTANTIATE(double)
#undef MPKV_INSTANTIATE

}  // namespace mpkv::calib

#include "model/ops.h"

#include <cmath>
#include <vector>

#include "model/activation_kernels.h"
#include "util/thread_pool.h"

namespace mpkv {

namespace {
// Pool chunks (util/thread_pool.h) of the row-wise ops (prefill only: decode rows run serially)
// and of the element-wise ones; each row / element is computed the same way on any thread.
constexpr int64_t kRowsPerChunk = 4;
constexpr int64_t kElementsPerChunk = 16384;
}  // namespace

void rmsnorm_forward(const float* x, const float* w, float* out, int n, int d, float eps) {
  parallel_for(n, n > 4 ? kRowsPerChunk : n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* xi = x + (size_t)i * d;
      float* oi = out + (size_t)i * d;
      double ss = 0.0;
      for (int j = 0; j < d; ++j) ss += (double)xi[j] * xi[j];
      const float inv = 1.0f / std::sqrt((float)(ss / d) + eps);
      for (int j = 0; j < d; ++j) oi[j] = xi[j] * inv * w[j];
    }
  });
}

namespace {
// Rotates the n_heads heads of one token's row x [n_heads, head_dim]: pair j by the angle whose
// cosine and sine are cs[2j], cs[2j + 1].
void rope_row(float* x, int n_heads, int head_dim, RopeStyle style, const float* cs) {
  const int half = head_dim / 2;
  for (int j = 0; j < half; ++j) {
    const float c = cs[2 * j], s = cs[2 * j + 1];
    const int a = style == RopeStyle::adjacent ? 2 * j : j;
    const int b = style == RopeStyle::adjacent ? 2 * j + 1 : j + half;
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + (size_t)h * head_dim;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * c - x1 * s;
      xh[b] = x0 * s + x1 * c;
    }
  }
}
}  // namespace

void rope_forward_qk(float* q, int n_q_heads, float* k, int n_k_heads, const int* pos, int n, int head_dim,
                     const RopeParams& rope, float pos_scale) {
  const int half = head_dim / 2;
  const RopeStyle style = rope.style;
  std::vector<float> inv_freq(half);
  for (int j = 0; j < half; ++j) {
    inv_freq[j] = std::pow(rope.base, -2.0f * (float)j / (float)head_dim);
    if (rope.freq_factors) inv_freq[j] /= rope.freq_factors[j];
  }
  parallel_for(n, n > 4 ? kRowsPerChunk : n, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> cs;
    cs.resize(2 * (size_t)half);
    for (int64_t i = i0; i < i1; ++i) {
      const float p = (float)pos[i] * pos_scale / rope.scale;
      for (int j = 0; j < half; ++j) {
        const float theta = p * inv_freq[j];
        cs[2 * j] = std::cos(theta);
        cs[2 * j + 1] = std::sin(theta);
      }
      rope_row(q + (size_t)i * n_q_heads * head_dim, n_q_heads, head_dim, style, cs.data());
      if (k) rope_row(k + (size_t)i * n_k_heads * head_dim, n_k_heads, head_dim, style, cs.data());
    }
  });
}

void rope_forward(float* x, const int* pos, int n, int n_heads, int head_dim, const RopeParams& rope,
                  float pos_scale) {
  rope_forward_qk(x, n_heads, nullptr, 0, pos, n, head_dim, rope, pos_scale);
}

void swiglu_forward(float* gate, const float* up, int64_t n) {
  const SiluMulFn silu_mul = activation_kernels().silu_mul;
  parallel_for(n, n > 65536 ? kElementsPerChunk : n,
               [&](int64_t i0, int64_t i1) { silu_mul(gate + i0, up + i0, i1 - i0); });
}

void geglu_tanh_forward(float* gate, const float* up, int64_t n) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kCubic = 0.044715f;
  parallel_for(n, n > 65536 ? kElementsPerChunk : n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float x = gate[i];
      gate[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCubic * x * x))) * up[i];
    }
  });
}

void gated_activation_forward(FfnActivation act, float* gate, const float* up, int64_t n) {
  switch (act) {
    case FfnActivation::silu: return swiglu_forward(gate, up, n);
    case FfnActivation::gelu_tanh: return geglu_tanh_forward(gate, up, n);
  }
}

void softcap_forward(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias(float* x, const float* b, int n, int m) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) x[(size_t)i * m + j] += b[j];
}

}  // namespace mpkv

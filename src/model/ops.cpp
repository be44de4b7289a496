#include "model/ops.h"

#include <algorithm>
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

RopeParams layer_rope(const ModelConfig& c, int l, const float* freq_factors) {
  const LayerAttention& la = c.attn(l);
  return RopeParams{c.rope_style, la.rope_base, la.rope_scale, freq_factors, c.rope_yarn, c.rope_attn_factor};
}

RopePairTable rope_pair_table(const RopeParams& rope, int head_dim) {
  const int half = head_dim / 2;
  RopePairTable t;
  t.inv_freq.resize(half);
  t.mix.assign(half, 0.0f);
  for (int j = 0; j < half; ++j) {
    t.inv_freq[j] = std::pow(rope.base, -2.0f * (float)j / (float)head_dim);
    if (rope.freq_factors) t.inv_freq[j] /= rope.freq_factors[j];
  }
  const float freq_scale = 1.0f / rope.scale;
  t.inv_scale = freq_scale;
  t.mscale = rope.attn_factor;
  const RopeYarn& y = rope.yarn;
  if (y.ext_factor == 0.0f) return t;
  // ggml_rope_yarn_corr_dims and rope_yarn_ramp, in float as ggml computes them.
  const float pi = 3.14159265358979323846f;
  auto corr = [&](float beta) {
    return (float)head_dim * std::log((float)y.n_ctx_orig / (beta * 2.0f * pi)) / (2.0f * std::log(rope.base));
  };
  const float low = std::max(0.0f, std::floor(corr(y.beta_fast)));
  const float high = std::min((float)(head_dim - 1), std::ceil(corr(y.beta_slow)));
  for (int j = 0; j < half; ++j) {
    const float r = ((float)j - low) / std::max(0.001f, high - low);
    t.mix[j] = (1.0f - std::min(1.0f, std::max(0.0f, r))) * y.ext_factor;
  }
  t.mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  return t;
}

void rope_forward_qk(float* q, int n_q_heads, float* k, int n_k_heads, const int* pos, int n, int head_dim,
                     const RopeParams& rope, float pos_scale) {
  const int half = head_dim / 2;
  const RopeStyle style = rope.style;
  const RopePairTable t = rope_pair_table(rope, head_dim);
  parallel_for(n, n > 4 ? kRowsPerChunk : n, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> cs;
    cs.resize(2 * (size_t)half);
    for (int64_t i = i0; i < i1; ++i) {
      const float p_extrap = (float)pos[i] * pos_scale;
      const float p_interp = p_extrap * t.inv_scale;
      for (int j = 0; j < half; ++j) {
        const float theta = p_interp * t.inv_freq[j] * (1.0f - t.mix[j]) + p_extrap * t.inv_freq[j] * t.mix[j];
        cs[2 * j] = std::cos(theta) * t.mscale;
        cs[2 * j + 1] = std::sin(theta) * t.mscale;
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

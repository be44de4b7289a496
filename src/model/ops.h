// Elementwise and per-row operations of the transformer block (scalar, cheap next to the matmuls,
// except the SiLU gate: activation_kernels.h).
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace mpkv {

// out[i, :] = x[i, :] / rms(x[i, :]) * w, for x [n, d]. out may alias x.
void rmsnorm_forward(const float* x, const float* w, float* out, int n, int d, float eps);

// How one layer's RoPE turns pair j of a token at position p (docs/models.md, "RoPE"), as
// ggml_rope_ext computes it (freq_scale = 1 / scale, freq_factors = llama.cpp's rope_freqs.weight):
//   extrap_j = p * pos_scale * base^(-2j / head_dim) / freq_factors[j]
//   interp_j = extrap_j / scale
//   theta_j  = interp_j * (1 - mix_j) + extrap_j * mix_j,  mix_j = ext_factor * ramp_j (0 without YaRN)
//   x' = mscale * R(theta_j) x,  mscale = attn_factor * (ext_factor != 0 ? 1 + 0.1 ln(scale) : 1)
// with YaRN's ramp_j = 1 - clamp((j - low) / max(0.001, high - low), 0, 1) over the correction dims
// low = max(0, floor(corr(beta_fast))), high = min(head_dim - 1, ceil(corr(beta_slow))),
// corr(b) = head_dim * ln(n_ctx_orig / (2 pi b)) / (2 ln base). adjacent style rotates channel pairs
// (2j, 2j+1), neox style pairs (j, j + head_dim/2).
struct RopeParams {
  RopeStyle style = RopeStyle::adjacent;
  float base = 10000.0f;
  float scale = 1.0f;                   // linear / yarn scaling: positions are divided by it
  const float* freq_factors = nullptr;  // [head_dim / 2], each > 0; null: all 1
  RopeYarn yarn;                        // ext_factor 0: no YaRN
  float attn_factor = 1.0f;             // cos and sin are multiplied by it (ModelConfig::rope_attn_factor)
};

// Layer l's RoPE for config c (its base and scale, the model's YaRN and attention factor) with the
// model's frequency factors (null: none).
RopeParams layer_rope(const ModelConfig& c, int layer, const float* freq_factors);

// The per-pair terms of the formula above, computed once per layer: theta_j(p) =
// p * (inv_scale * inv_freq[j] * (1 - mix[j]) + inv_freq[j] * mix[j]), then times mscale.
struct RopePairTable {
  std::vector<float> inv_freq;  // base^(-2j / head_dim) / freq_factors[j]
  std::vector<float> mix;       // ext_factor * ramp_j; all 0 without YaRN
  float inv_scale = 1.0f;
  float mscale = 1.0f;
};
RopePairTable rope_pair_table(const RopeParams& rope, int head_dim);

// Rotates x [n, n_heads, head_dim] in place; token i is at position pos[i] (times pos_scale).
void rope_forward(float* x, const int* pos, int n, int n_heads, int head_dim, const RopeParams& rope,
                  float pos_scale = 1.0f);

// rope_forward of the queries q [n, n_q_heads, head_dim] and the keys k [n, n_k_heads, head_dim]
// (k may be null) in one pass: each (token, pair) angle's cosine and sine computed once for both,
// and one pool job instead of two; the same bits as two rope_forward calls.
void rope_forward_qk(float* q, int n_q_heads, float* k, int n_k_heads, const int* pos, int n, int head_dim,
                     const RopeParams& rope, float pos_scale = 1.0f);

// gate[i] = silu(gate[i]) * up[i] for i < n: the SiLU gate of activation_kernels.h (a fixed fp32
// exp, the same bits at every ISA tier).
void swiglu_forward(float* gate, const float* up, int64_t n);

// gate[i] = gelu(gate[i]) * up[i] for i < n, GELU by its tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GeGLU; what llama.cpp computes for gemma).
void geglu_tanh_forward(float* gate, const float* up, int64_t n);

// The gated activation of the feed-forward: swiglu_forward or geglu_tanh_forward.
void gated_activation_forward(FfnActivation act, float* gate, const float* up, int64_t n);

// x[i] = cap * tanh(x[i] / cap) (logit soft-capping), cap > 0.
void softcap_forward(float* x, int64_t n, float cap);

// x[i] *= s.
void scale_inplace(float* x, int64_t n, float s);

// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t n);

// x [n, m] += b [m] on every row.
void add_bias(float* x, const float* b, int n, int m);

}  // namespace mpkv

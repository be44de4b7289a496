// Int8 queries and weights for the q8 kernels (paged_attention_kernels.h, Q8Queries): the one
// rounding rule, the query quantizer, the channel-axis (KIVI) scale fold, and the value weights' fold.
#include <algorithm>
#include <cmath>

#include "attention/paged_attention.h"
#include "attention/paged_attention_kernels.h"
#include "util/fp16.h"

namespace mpkv {

float quantize_q8_row(const float* x, int d, int8_t* q8) {
  float amax = 0.0f;
  for (int c = 0; c < d; ++c) amax = std::max(amax, std::abs(x[c]));
  const float scale = amax / 127.0f;
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int c = 0; c < d; ++c) q8[c] = (int8_t)std::clamp((int)std::nearbyint(x[c] * inv), -127, 127);
  return scale;
}

float fold_channel_query(const KvBlockLayout& L, const uint8_t* block, int tg, const float* q, float* qf) {
  const size_t p0 = (size_t)tg * L.head_dim;
  float zterm = 0.0f;
  for (int c = 0; c < L.head_dim; ++c) {
    const float s = fp16_to_fp32(load_half(block, L.scales_offset, p0 + c)) * L.scale_mult;
    qf[c] = q[c] * s;
    zterm += q[c] * fp16_to_fp32(load_half(block, L.zeros_offset, p0 + c));
  }
  return zterm;
}

float quantize_weights_q8(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, int8_t* w8,
                          float* bz) {
  float wf[kMaxKernelRows];
  float z = 0.0f;
  for (int i = 0; i < n; ++i) {
    const size_t t = (size_t)(t0 + i);
    wf[i] = w[i] * (fp16_to_fp32(load_half(block, L.scales_offset, t)) * L.scale_mult);
    z += w[i] * fp16_to_fp32(load_half(block, L.zeros_offset, t));
  }
  *bz = z;
  return quantize_q8_row(wf, n, w8);
}

Q8Queries quantize_queries_q8(const float* q, size_t ldq, int nq, int d, std::vector<int8_t>& storage,
                              std::vector<float>& params) {
  storage.assign((size_t)nq * d, 0);
  params.assign((size_t)2 * nq, 0.0f);
  Q8Queries r;
  r.nq = nq;
  r.d = d;
  int8_t* nat = storage.data();
  for (int j = 0; j < nq; ++j) {
    const float* qj = q + (size_t)j * ldq;
    float sum = 0.0f;
    for (int c = 0; c < d; ++c) sum += qj[c];
    int8_t* n8 = nat + (size_t)j * d;
    params[j] = quantize_q8_row(qj, d, n8);
    params[nq + j] = sum;
  }
  r.natural = nat;
  r.scale = params.data();
  r.sum = params.data() + nq;
  r.f = q;
  r.ldf = ldq;
  return r;
}

}  // namespace mpkv

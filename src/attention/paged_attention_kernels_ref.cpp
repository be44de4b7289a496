// Scalar reference kernels of paged attention: each packed value is dequantized on its own, by
// the definitions in kv_block_layout.h, and used at once (never stored).
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/paged_attention_kernels.h"
#include "util/fp16.h"

namespace mpkv {

namespace {

// x_hat of code (t, c) in code space.
float dequant_one(const PackedBlockView& b, int t, int c) {
  const KvBlockLayout& L = *b.layout;
  const uint32_t code = get_code(L, b.data, t, c);
  const size_t pi = L.param_index(t, c);
  const float s = fp16_to_fp32(load_half(b.data, L.scales_offset, pi));
  if (L.codec == Codec::lloyd_max) return b.centroids[code] * (s / std::sqrt((float)L.head_dim));
  return (float)code * (s * L.scale_mult) + fp16_to_fp32(load_half(b.data, L.zeros_offset, pi));
}

}  // namespace

void packed_scores_ref(const PackedBlockView& b, const float* q, size_t ldq, int nq, int t0, int n, float* s,
                       size_t lds) {
  const int d = b.layout->head_dim;
  for (int j = 0; j < nq; ++j) {
    for (int i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int c = 0; c < d; ++c) acc += q[(size_t)j * ldq + c] * dequant_one(b, t0 + i, c);
      s[(size_t)j * lds + i] = acc;
    }
  }
}

void packed_accumulate_ref(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                           size_t ldacc) {
  const int d = b.layout->head_dim;
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) {
      const float x = dequant_one(b, t0 + i, c);
      for (int j = 0; j < nq; ++j) acc[(size_t)j * ldacc + c] += w[(size_t)j * ldw + i] * x;
    }
  }
}

void f16_scores_ref(const uint16_t* x, size_t stride, int d, const float* q, size_t ldq, int nq, int n, float* s,
                    size_t lds) {
  for (int j = 0; j < nq; ++j) {
    for (int i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int c = 0; c < d; ++c) acc += q[(size_t)j * ldq + c] * fp16_to_fp32(x[(size_t)i * stride + c]);
      s[(size_t)j * lds + i] = acc;
    }
  }
}

void f16_accumulate_ref(const uint16_t* x, size_t stride, int d, const float* w, size_t ldw, int nq, int n, float* acc,
                        size_t ldacc) {
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) {
      const float v = fp16_to_fp32(x[(size_t)i * stride + c]);
      for (int j = 0; j < nq; ++j) acc[(size_t)j * ldacc + c] += w[(size_t)j * ldw + i] * v;
    }
  }
}

namespace {
// The integer dot of one q8 query with row t's codes.
int32_t q8_dot(const KvBlockLayout& L, const uint8_t* blk, const int8_t* q8, int t) {
  int32_t acc = 0;
  for (int c = 0; c < L.head_dim; ++c) acc += (int32_t)q8[c] * (int32_t)get_code(L, blk, t, c);
  return acc;
}
}  // namespace

void packed_scores_q8_ref(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds) {
  const KvBlockLayout& L = *b.layout;
  if (L.axis == GroupAxis::token) {
    for (int j = 0; j < q.nq; ++j) {
      for (int i = 0; i < n; ++i) {
        const int32_t acc = q8_dot(L, b.data, q.natural + (size_t)j * q.d, t0 + i);
        const float S = fp16_to_fp32(load_half(b.data, L.scales_offset, (size_t)(t0 + i))) * L.scale_mult;
        const float Z = fp16_to_fp32(load_half(b.data, L.zeros_offset, (size_t)(t0 + i)));
        s[(size_t)j * lds + i] = S * (q.scale[j] * (float)acc) + Z * q.sum[j];
      }
    }
    return;
  }
  std::vector<float> qf((size_t)q.d);
  std::vector<int8_t> q8((size_t)q.d);
  for (int i = 0; i < n;) {
    const int tg = (t0 + i) / L.group, end = std::min(n, (tg + 1) * L.group - t0);
    for (int j = 0; j < q.nq; ++j) {
      const float zterm = fold_channel_query(L, b.data, tg, q.f + (size_t)j * q.ldf, qf.data());
      const float scale = quantize_q8_row(qf.data(), q.d, q8.data());
      for (int k = i; k < end; ++k) s[(size_t)j * lds + k] = scale * (float)q8_dot(L, b.data, q8.data(), t0 + k) + zterm;
    }
    i = end;
  }
}

void packed_accumulate_q8_ref(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                              size_t ldacc) {
  const KvBlockLayout& L = *b.layout;
  std::vector<int8_t> w8((size_t)n);
  for (int j = 0; j < nq; ++j) {
    float bz;
    const float step = quantize_weights_q8(L, b.data, w + (size_t)j * ldw, t0, n, w8.data(), &bz);
    for (int c = 0; c < L.head_dim; ++c) {
      int32_t sum = 0;
      for (int i = 0; i < n; ++i) sum += (int32_t)w8[i] * (int32_t)get_code(L, b.data, t0 + i, c);
      acc[(size_t)j * ldacc + c] += step * (float)sum + bz;
    }
  }
}

float max_value_ref(const float* s, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::max(m, s[i]);
  return m;
}

float exp_sum_ref(float* s, int n, float m) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - m);  // exp(-inf) = 0
    sum += s[i];
  }
  return sum;
}

}  // namespace mpkv

// Helpers shared by the paged KV cache tests: random K/V/Q, plans by method, and the reference
// "dequantize everything, then attend" (double precision), built from the cache's pages through
// KvQuantizer::dequantize (the quantizer library), never through the attention kernels.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>
#include <cstring>

#include "kvcache/kv_cache_factory.h"
#include "kvcache/paged_kv_cache.h"
#include "quant/kv_quantizer.h"
#include "util/fp16.h"

namespace mpkv::test {

inline KvDims small_dims() { return KvDims{2, 4, 2, 64}; }  // 2 layers, 4 query heads, 2 KV heads

// Cache options by method name (kv_method.h), final bits, fp16 window and sink, page tokens, group.
inline KvCacheOptions cache_options(const std::string& method, int bits, int window, int sink, int page, int group = 0) {
  KvCacheOptions o;
  o.method = parse_kv_method(method);
  o.bits = bits;
  o.window = window;
  o.sink = sink;
  o.page_tokens = page;
  o.group = group;
  return o;
}

// [n, n_head_kv, head_dim] rows like real keys / values: per-channel offsets and spreads, a few
// outlier channels (keys), plus noise.
inline std::vector<float> random_kv(int n, const KvDims& d, uint32_t seed, bool keys) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x((size_t)n * d.n_head_kv * d.head_dim);
  std::mt19937 chan_rng(keys ? 7 : 11);  // the same channel structure for every call
  std::vector<float> off(d.n_head_kv * d.head_dim), spread(d.n_head_kv * d.head_dim);
  for (size_t c = 0; c < off.size(); ++c) {
    off[c] = keys ? 0.5f * nd(chan_rng) : 0.0f;
    spread[c] = (keys && c % 17 == 3) ? 6.0f : 1.0f;
  }
  for (int t = 0; t < n; ++t)
    for (size_t c = 0; c < off.size(); ++c) x[(size_t)t * off.size() + c] = off[c] + spread[c] * nd(rng);
  return x;
}

inline std::vector<float> random_q(int n, const KvDims& d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q((size_t)n * d.n_head * d.head_dim);
  for (float& x : q) x = nd(rng);
  return q;
}

// Everything one (seq, layer) received, in position order: [n, n_head_kv, head_dim] fp32.
struct History {
  std::vector<float> k, v;
  int n = 0;
  void add(int m, const float* kk, const float* vv, size_t row) {
    k.insert(k.end(), kk, kk + m * row);
    v.insert(v.end(), vv, vv + m * row);
    n += m;
  }
};

inline float round_fp16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

// K_hat, V_hat of (seq, layer) as the cache holds them: fp16 for sink / window / fp16 pages,
// KvQuantizer::dequantize of each quantized page block at its current bits.
inline void dequantized_cache(const PagedKvCache& c, int seq, int layer, const History& h, std::vector<double>& K,
                              std::vector<double>& V) {
  const KvDims& d = c.dims();
  const KvPlan& plan = c.plan();
  const size_t row = (size_t)d.n_head_kv * d.head_dim;
  K.assign((size_t)h.n * row, 0.0);
  V.assign((size_t)h.n * row, 0.0);
  for (size_t i = 0; i < (size_t)h.n * row; ++i) {
    K[i] = round_fp16(h.k[i]);
    V[i] = round_fp16(h.v[i]);
  }
  const int sink = std::min(plan.sink, h.n);
  const int in_pages = c.byte_model().tokens_in_pages(layer, h.n);
  const int P = plan.page_tokens;
  std::vector<float> y((size_t)P * d.head_dim);
  // A sliding-window layer frees its oldest full pages: the live ones are the last n_pages.
  const int dropped_pages = (in_pages + P - 1) / P - c.n_pages(seq, layer);
  for (int p = dropped_pages; p < dropped_pages + c.n_pages(seq, layer); ++p) {
    const int rows = std::min(P, in_pages - p * P);
    for (int b = 0; b < 2 * d.n_head_kv; ++b) {
      const KvRole role = b % 2 == 0 ? KvRole::key : KvRole::value;
      const KvComponentPlan& cp = plan.at(layer, b / 2, role);
      if (cp.fp16) continue;  // fp16 pages hold the fp16 rows already in K / V
      KvBlockLayout L;
      const uint8_t* data = c.page_block(seq, layer, p - dropped_pages, b, &L);
      const KvQuantizer qz(component_quant_options(plan, cp, role, L.bits));
      // Whole token groups only (KIVI keys); a page is filled in whole groups.
      qz.dequantize(L, data, 0, rows, y.data(), (size_t)d.head_dim);
      std::vector<double>& dst = role == KvRole::key ? K : V;
      for (int t = 0; t < rows; ++t)
        for (int ch = 0; ch < d.head_dim; ++ch)
          dst[(size_t)(sink + p * P + t) * row + (size_t)(b / 2) * d.head_dim + ch] = y[(size_t)t * d.head_dim + ch];
    }
  }
}

// Causal attention of the last n_q positions in double over K, V [n, n_head_kv, head_dim];
// q [n_q, n_head, head_dim] -> out (same shape). window > 0: the query at position p sees only
// positions [p - window + 1, p] (a sliding-window layer).
inline std::vector<double> reference_attention(const KvDims& d, const std::vector<double>& K, const std::vector<double>& V,
                                               int n, const float* q, int n_q, int window = 0) {
  const int group = d.n_head / d.n_head_kv, hd = d.head_dim;
  const size_t row = (size_t)d.n_head_kv * hd;
  std::vector<double> out((size_t)n_q * d.n_head * hd, 0.0);
  for (int i = 0; i < n_q; ++i) {
    const int vis = n - n_q + i + 1;
    const int lo = window > 0 ? std::max(0, vis - window) : 0;
    for (int hq = 0; hq < d.n_head; ++hq) {
      const int h = hq / group;
      const float* qq = q + ((size_t)i * d.n_head + hq) * hd;
      std::vector<double> s(vis);
      double m = -INFINITY;
      for (int t = lo; t < vis; ++t) {
        double a = 0;
        for (int c = 0; c < hd; ++c) a += (double)qq[c] * K[(size_t)t * row + (size_t)h * hd + c];
        s[t] = a / std::sqrt((double)hd);
        m = std::max(m, s[t]);
      }
      double l = 0;
      for (int t = lo; t < vis; ++t) l += (s[t] = std::exp(s[t] - m));
      double* o = &out[((size_t)i * d.n_head + hq) * hd];
      for (int t = lo; t < vis; ++t)
        for (int c = 0; c < hd; ++c) o[c] += s[t] / l * V[(size_t)t * row + (size_t)h * hd + c];
    }
  }
  return out;
}

// The first position a query at p of a sequence that attached no prefix reads at fp16 (sink and
// window) in `layer`, written out from the rule rather than asked of the cache: had the tokens
// arrived one at a time, the window would hold R..R+g-1 rows after the sink when p is appended,
// flushing its oldest g at a time (kv_byte_model.h; R the layer's window, g its flush granularity),
// and a query reads that, whatever the prefill chunks (docs/numerics.md, "Prefill chunks").
inline int decoded_fp16_from(const PagedKvCache& c, int layer, int p) {
  const int sink = c.plan().sink, R = c.byte_model().window(layer), g = c.byte_model().flush_granularity(layer);
  if (p < sink) return p + 1;
  int flushed = 0;  // rows after the sink in pages once p is appended
  while (p + 1 - sink - flushed >= R + g) flushed += g;
  return sink + flushed;
}

// reference_attention of the last n_q of h.n positions as each query reads them: K, V (the cache's
// dequantized rows, dequantized_cache) below decoded_fp16_from, the fp16 rows of h from it on.
inline std::vector<double> reference_attention_decoded(const PagedKvCache& c, int layer, const History& h,
                                                       const std::vector<double>& K, const std::vector<double>& V,
                                                       const float* q, int n_q, int window = 0) {
  const KvDims& d = c.dims();
  const size_t row = (size_t)d.n_head_kv * d.head_dim, q_row = (size_t)d.n_head * d.head_dim;
  std::vector<double> out;
  for (int i = 0; i < n_q; ++i) {
    const int p = h.n - n_q + i;
    std::vector<double> Kp(K.begin(), K.begin() + (p + 1) * row), Vp(V.begin(), V.begin() + (p + 1) * row);
    for (size_t x = (size_t)decoded_fp16_from(c, layer, p) * row; x < Kp.size(); ++x) {
      Kp[x] = round_fp16(h.k[x]);
      Vp[x] = round_fp16(h.v[x]);
    }
    const auto one = reference_attention(d, Kp, Vp, p + 1, q + i * q_row, 1, window);
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

}  // namespace mpkv::test

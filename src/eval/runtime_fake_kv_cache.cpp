#include "eval/runtime_fake_kv_cache.h"

#include <algorithm>
#include <cmath>

#include "attention/attention_f16.h"
#include "eval/fake_quant_kv_cache.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {

RuntimeFakeQuantKvCache::RuntimeFakeQuantKvCache(KvDims dims, const KvPlan& plan)
    : KvCache(dims), plan_(plan), rule_(dims, plan) {
  validate(plan_, dims);
  quant_ = component_quantizers(plan_, dims);
}

RuntimeFakeQuantKvCache::~RuntimeFakeQuantKvCache() = default;

int RuntimeFakeQuantKvCache::quantized_end(int layer, int p) const {
  return plan_.sink + rule_.tokens_in_pages(layer, p + 1);
}

int RuntimeFakeQuantKvCache::length(int seq, int layer) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second[layer].n_tokens;
}

// Quantizes rows [n_quantized, end) per (KV head, K|V) from their fp16 values, as the cache
// quantizes its fp16 window rows when it flushes them into pages (end - sink is a multiple of every
// token group of the layer: tokens_in_pages is).
void RuntimeFakeQuantKvCache::quantize_rows(LayerStore& s, int layer, int end) {
  const int hd = dims_.head_dim, nkv = dims_.n_head_kv, a = std::max(s.n_quantized, plan_.sink);
  if (end <= a) return;
  const size_t kv_dim = (size_t)nkv * hd, n = (size_t)(end - a);
  s.kq.resize(s.k.size());
  s.vq.resize(s.v.size());
  std::vector<float> in(n * hd), out(n * hd);
  for (int h = 0; h < nkv; ++h)
    for (int r = 0; r < 2; ++r) {
      const std::vector<uint16_t>& src = r == 0 ? s.k : s.v;
      std::vector<uint16_t>& dst = r == 0 ? s.kq : s.vq;
      const KvQuantizer* q = quant_[((size_t)layer * nkv + h) * 2 + r].get();
      for (size_t i = 0; i < n; ++i)
        for (int c = 0; c < hd; ++c) in[i * hd + c] = fp16_to_fp32(src[(a + i) * kv_dim + h * hd + c]);
      if (q) {
        const int g = q->token_granularity();
        MPKV_ASSERT(n % g == 0 && (a - plan_.sink) % g == 0, "runtime fake cache: group misaligned");
        q->quantize_dequantize(in.data(), (int)n, out.data());
      } else {
        out = in;
      }
      for (size_t i = 0; i < n; ++i)
        for (int c = 0; c < hd; ++c) dst[(a + i) * kv_dim + h * hd + c] = fp32_to_fp16(out[i * hd + c]);
    }
  s.n_quantized = end;
}

void RuntimeFakeQuantKvCache::append(int seq, int layer, int n_tokens, const float* k, const float* v) {
  MPKV_ASSERT(layer >= 0 && layer < dims_.n_layer, "KV append: layer out of range");
  auto& layers = seqs_[seq];
  if (layers.empty()) layers.resize(dims_.n_layer);
  LayerStore& s = layers[layer];
  const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim, old = s.k.size();
  s.k.resize(old + row * n_tokens);
  s.v.resize(old + row * n_tokens);
  for (size_t i = 0; i < row * n_tokens; ++i) s.k[old + i] = fp32_to_fp16(k[i]), s.v[old + i] = fp32_to_fp16(v[i]);
  s.n_tokens += n_tokens;
  quantize_rows(s, layer, quantized_end(layer, s.n_tokens - 1));
}

// Each (query, KV head) attends over up to three row ranges: fp16 [start, sink), quantized
// [sink, qend), fp16 [qend, p]; the partial softmaxes are merged.
void RuntimeFakeQuantKvCache::attend(int seq, int layer, int n_tokens, const float* q, float* out) {
  auto it = seqs_.find(seq);
  MPKV_ASSERT(it != seqs_.end(), "KV attend: unknown sequence");
  const LayerStore& s = it->second[layer];
  MPKV_ASSERT(n_tokens <= s.n_tokens, "KV attend: more queries than cached tokens");
  const int hd = dims_.head_dim, nkv = dims_.n_head_kv, group = dims_.n_head / nkv;
  const size_t stride = (size_t)nkv * hd;
  const float scale = 1.0f / std::sqrt((float)hd);
  const AttendF16PartialFn kernel = attend_f16_partial();
  const int window = dims_.window_of(layer);
#pragma omp parallel
  {
    std::vector<float> scratch((size_t)group * s.n_tokens), st(2 * (size_t)group * (2 + hd));
    const SoftmaxPartialView a{st.data(), st.data() + group, st.data() + 2 * group};
    float* b0 = st.data() + (size_t)group * (2 + hd);
    const SoftmaxPartialView b{b0, b0 + group, b0 + 2 * group};
#pragma omp for collapse(2) schedule(dynamic, 16)
    for (int i = 0; i < n_tokens; ++i)
      for (int h = 0; h < nkv; ++h) {
        const int p = s.n_tokens - n_tokens + i, start = window_start(window, p);
        const int qend = std::min(quantized_end(layer, p), p + 1), sink = std::min(plan_.sink, p + 1);
        const float* qh = q + ((size_t)i * dims_.n_head + (size_t)h * group) * hd;
        struct Range { const std::vector<uint16_t>* k; const std::vector<uint16_t>* v; int t0, t1; };
        const Range ranges[3] = {{&s.k, &s.v, start, sink},
                                 {&s.kq, &s.vq, std::max(start, plan_.sink), qend},
                                 {&s.k, &s.v, std::max(start, std::max(qend, sink)), p + 1}};
        bool first = true;
        for (const Range& r : ranges) {
          if (r.t0 >= r.t1) continue;
          kernel(qh, group, hd, r.k->data() + (size_t)h * hd, r.v->data() + (size_t)h * hd, stride, r.t0, r.t1, scale,
                 scratch.data(), first ? a : b);
          if (!first) softmax_partial_merge(a, b, group, hd);
          first = false;
        }
        softmax_partial_finish(a, group, hd, out + ((size_t)i * dims_.n_head + (size_t)h * group) * hd);
      }
  }
}

}  // namespace mpkv

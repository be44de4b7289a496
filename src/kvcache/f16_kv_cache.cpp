#include "kvcache/f16_kv_cache.h"

#include <cmath>
#include <vector>

#include "attention/attention_f16.h"
#include "util/error.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

namespace mpkv {

namespace {
// Cache rows one work unit attends over. Long contexts are split into chunks of this many rows
// so that a single decoding token keeps every thread busy; partials are merged afterwards.
constexpr int kChunkRows = 1024;
}  // namespace

F16KvCache::F16KvCache(KvDims dims) : KvCache(dims) {}

void F16KvCache::append(int seq, int layer, int n_tokens, const float* k, const float* v) {
  MPKV_ASSERT(layer >= 0 && layer < dims_.n_layer, "KV append: layer out of range");
  auto& layers = seqs_[seq];
  if (layers.empty()) layers.resize(dims_.n_layer);
  LayerStore& s = layers[layer];
  const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim;
  const size_t old = s.k.size();
  s.k.resize(old + row * n_tokens);
  s.v.resize(old + row * n_tokens);
  for (size_t i = 0; i < row * n_tokens; ++i) {
    s.k[old + i] = fp32_to_fp16(k[i]);
    s.v[old + i] = fp32_to_fp16(v[i]);
  }
  s.n_tokens += n_tokens;
}

void F16KvCache::attend(int seq, int layer, int n_tokens, const float* q, float* out) {
  auto it = seqs_.find(seq);
  MPKV_ASSERT(it != seqs_.end(), "KV attend: unknown sequence");
  const LayerStore& s = it->second[layer];
  MPKV_ASSERT(n_tokens <= s.n_tokens, "KV attend: more queries than cached tokens");
  const int hd = dims_.head_dim, nkv = dims_.n_head_kv, group = dims_.n_head / dims_.n_head_kv;
  const size_t row_stride = (size_t)nkv * hd;
  const float scale = 1.0f / std::sqrt((float)hd);
  const AttendF16PartialFn kernel = attend_f16_partial();

  // Work units: (query token i, KV head h, chunk c of the rows that token sees: [start, pos]).
  struct Unit { int i, h, t0, t1, first_unit_of_pair; };
  std::vector<Unit> units;
  const int window = dims_.window_of(layer);
  for (int i = 0; i < n_tokens; ++i) {
    const int pos = s.n_tokens - n_tokens + i, start = window_start(window, pos);
    for (int h = 0; h < nkv; ++h) {
      const int first = (int)units.size();
      for (int t0 = start; t0 <= pos; t0 += kChunkRows) units.push_back({i, h, t0, std::min(pos + 1, t0 + kChunkRows), first});
    }
  }
  // Partial state per unit: m[group], l[group], acc[group, hd].
  const size_t state = (size_t)group * (2 + hd);
  std::vector<float> partial(units.size() * state);
  auto view = [&](size_t u) {
    float* p = partial.data() + u * state;
    return SoftmaxPartialView{p, p + group, p + 2 * group};
  };
  // One unit per pool chunk (util/thread_pool.h): whoever is free takes the next one.
  parallel_for((int64_t)units.size(), 1, [&](int64_t u0, int64_t u1) {
    thread_local std::vector<float> scratch;
    scratch.resize((size_t)group * kChunkRows);
    for (int64_t u = u0; u < u1; ++u) {
      const Unit& w = units[u];
      const float* qh = q + ((size_t)w.i * dims_.n_head + (size_t)w.h * group) * hd;
      kernel(qh, group, hd, s.k.data() + (size_t)w.h * hd, s.v.data() + (size_t)w.h * hd, row_stride, w.t0, w.t1,
             scale, scratch.data(), view(u));
    }
  });
  // Merge chunks of each (token, head) into the first one and normalise.
  for (size_t u = 0; u < units.size();) {
    const size_t first = u;
    size_t end = u + 1;
    while (end < units.size() && units[end].first_unit_of_pair == (int)first) {
      softmax_partial_merge(view(first), view(end), group, hd);
      ++end;
    }
    const Unit& w = units[first];
    softmax_partial_finish(view(first), group, hd, out + ((size_t)w.i * dims_.n_head + (size_t)w.h * group) * hd);
    u = end;
  }
}

int F16KvCache::length(int seq, int layer) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second[layer].n_tokens;
}

size_t F16KvCache::bytes_used() const {
  size_t b = 0;
  for (const auto& [id, layers] : seqs_)
    for (const auto& l : layers) b += (l.k.size() + l.v.size()) * sizeof(uint16_t);
  return b;
}

}  // namespace mpkv

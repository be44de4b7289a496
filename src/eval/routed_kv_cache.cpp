#include "eval/routed_kv_cache.h"

#include <string>

#include "kvcache/paged_kv_cache.h"
#include "util/error.h"

namespace mpkv {

void RoutedKvCache::route(int seq, PagedKvCache* cache, int local_seq, std::vector<std::vector<float>> smoothing) {
  MPKV_ASSERT(seq >= 0 && cache != nullptr, "routed cache: bad route");
  const KvDims& d = cache->dims();
  MPKV_ASSERT(d.n_layer == dims_.n_layer && d.n_head == dims_.n_head && d.n_head_kv == dims_.n_head_kv &&
                  d.head_dim == dims_.head_dim && d.window == dims_.window,
              "routed cache: a routed cache has other dims or sliding windows");
  MPKV_ASSERT(smoothing.empty() || (int)smoothing.size() == dims_.n_layer,
              "routed cache: smoothing has " + std::to_string(smoothing.size()) + " layers, expected " +
                  std::to_string(dims_.n_layer));
  for (const auto& l : smoothing)
    MPKV_ASSERT(l.empty() || (int)l.size() == dims_.n_head_kv * dims_.head_dim,
                "routed cache: smoothing layer has " + std::to_string(l.size()) + " scales");
  if ((int)routes_.size() <= seq) routes_.resize(seq + 1);
  MPKV_ASSERT(routes_[seq].cache == nullptr, "routed cache: sequence " + std::to_string(seq) + " is routed twice");
  routes_[seq] = {cache, local_seq, std::move(smoothing)};
}

const RoutedKvCache::Route& RoutedKvCache::at(int seq) const {
  MPKV_ASSERT(seq >= 0 && seq < (int)routes_.size() && routes_[seq].cache != nullptr,
              "routed cache: sequence " + std::to_string(seq) + " has no route");
  return routes_[seq];
}

const float* RoutedKvCache::lambda(const Route& r, int layer) const {
  if (r.lambda.empty() || r.lambda[layer].empty()) return nullptr;
  return r.lambda[layer].data();
}

void RoutedKvCache::append(int seq, int layer, int n_tokens, const float* k, const float* v) {
  const Route& r = at(seq);
  const float* lam = lambda(r, layer);
  if (!lam) return r.cache->append(r.local, layer, n_tokens, k, v);
  // k [n_tokens, n_head_kv * head_dim] /= lambda per channel.
  const int kv_dim = dims_.n_head_kv * dims_.head_dim;
  scratch_.assign(k, k + (size_t)n_tokens * kv_dim);
  for (int i = 0; i < n_tokens; ++i)
    for (int j = 0; j < kv_dim; ++j) scratch_[(size_t)i * kv_dim + j] /= lam[j];
  r.cache->append(r.local, layer, n_tokens, scratch_.data(), v);
}

void RoutedKvCache::attend(int seq, int layer, int n_tokens, const float* q, float* out) {
  const Route& r = at(seq);
  const float* lam = lambda(r, layer);
  if (!lam) return r.cache->attend(r.local, layer, n_tokens, q, out);
  // q [n_tokens, n_head, head_dim] *= lambda of its KV head's channels (grouped-query attention).
  const int hd = dims_.head_dim, group = dims_.n_head / dims_.n_head_kv, q_dim = dims_.n_head * hd;
  scratch_.assign(q, q + (size_t)n_tokens * q_dim);
  for (int i = 0; i < n_tokens; ++i)
    for (int h = 0; h < dims_.n_head; ++h)
      for (int j = 0; j < hd; ++j) scratch_[(size_t)i * q_dim + h * hd + j] *= lam[(h / group) * hd + j];
  r.cache->attend(r.local, layer, n_tokens, scratch_.data(), out);
}

int RoutedKvCache::length(int seq, int layer) const {
  if (seq < 0 || seq >= (int)routes_.size() || routes_[seq].cache == nullptr) return 0;
  return routes_[seq].cache->length(routes_[seq].local, layer);
}

bool RoutedKvCache::reserve(int seq, int n_tokens) {
  const Route& r = at(seq);
  return r.cache->reserve(r.local, n_tokens);
}

}  // namespace mpkv

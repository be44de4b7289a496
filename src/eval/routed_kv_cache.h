// One KvCache face over several caches, so one Forward::run can step many methods at once.
//
// The evaluator decodes the same token streams through a 16-bit reference cache and every method's
// cache in lockstep (eval_decode.h): each (method, stream) is a sequence id of this cache, routed
// to (cache, local sequence id). A route may carry the method's key smoothing (a calibrated plan's
// lambda, [n_layer][n_head_kv * head_dim]): keys are divided and queries multiplied by it here,
// after RoPE, where Forward::set_qk_smoothing does it before RoPE. Both are the same because a
// plan's lambda is equal on the two channels of each RoPE pair (calib/smoothing.h), so it commutes
// with the rotation; this lets methods with different plans share one forward pass. The routed
// caches are PagedKvCaches: reserve() goes to the route's cache as a KvMemory (kvcache/kv_memory.h).
#pragma once
#include <vector>

#include "model/kv_cache.h"

namespace mpkv {

class PagedKvCache;

class RoutedKvCache final : public KvCache {
 public:
  explicit RoutedKvCache(KvDims dims) : KvCache(dims) {}

  // Makes sequence `seq` (ids from 0, any order) an alias of (cache, local_seq). `smoothing` empty:
  // none; else one lambda vector per layer (an empty entry: none for that layer). The cache must
  // outlive this object and have the same dims. Error on a taken id or a shape mismatch.
  void route(int seq, PagedKvCache* cache, int local_seq, std::vector<std::vector<float>> smoothing = {});

  void append(int seq, int layer, int n_tokens, const float* k, const float* v) override;
  void attend(int seq, int layer, int n_tokens, const float* q, float* out) override;
  int length(int seq, int layer) const override;
  // KvMemory::reserve of the route's cache, for its local sequence.
  bool reserve(int seq, int n_tokens);

 private:
  struct Route {
    PagedKvCache* cache = nullptr;
    int local = 0;
    std::vector<std::vector<float>> lambda;
  };
  const Route& at(int seq) const;
  const float* lambda(const Route& r, int layer) const;

  std::vector<Route> routes_;
  std::vector<float> scratch_;
};

}  // namespace mpkv

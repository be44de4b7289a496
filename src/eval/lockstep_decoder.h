// The decode protocol (docs/algorithms.md §9), for many methods at once.
//
// W token streams are decoded token by token, in lockstep, through a 16-bit reference cache and
// through every method's PagedKvCache: at step t each (cache, stream) gets its token at position
// t, so every token attends to exactly the cache state it would see when generated one token at a
// time (quantized pages, fp16 window, shrinks so far). All (cache, stream) pairs are sequences of
// one RoutedKvCache and go through Forward::run together, by default all (1 + methods) x streams
// tokens of a step in one call (caches_per_call limits a call to that many caches' streams): the
// same quantized tile kernels a single-token decode uses, whose per-row result does not depend on
// how many rows share a call (docs/numerics.md), so a stream's logits are those of generating it
// alone and do not depend on the call size (test_kveval_protocols checks both), while each weight
// block is read once per step instead of once per call. A call never splits a cache's streams: they
// all reserve their position (which may shrink each other's progressive pages under the shared
// budget) before any of them attends, as in a server's step.
//
// Budgets: a method whose options give none and whose plan is progressive gets
// W * sequence_bytes_bound(max_len): its pages reach their final bits as the streams reach
// max_len, as they would in a server filled to the budget. Other methods run without a budget.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "eval/routed_kv_cache.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"

namespace mpkv {

// A method under evaluation: how its cache is built, and how it is shown.
struct EvalMethod {
  std::string method;       // uniform, kivi, ..., pmkvq, ratequant, combined, f16
  std::string label;        // e.g. "kivi-2.5 (K3/V2)"
  double bits = 16;         // nominal average final bits
  KvCacheOptions kv;
};

class LockstepDecoder {
 public:
  // Builds the reference (fp16 pages) and one cache per method for n_streams streams of up to
  // max_len tokens; a step goes through the model in forward calls of the streams of at most
  // caches_per_call caches (0: one call for all). Error when a method's options are invalid (before any work).
  LockstepDecoder(const Model& model, std::vector<EvalMethod> methods, int n_streams, int max_len,
                  int caches_per_call = 0);

  int n_methods() const { return (int)methods_.size(); }
  int n_streams() const { return n_streams_; }
  const EvalMethod& method(int m) const { return methods_[m]; }
  // The cache of method m (-1: the reference).
  const PagedKvCache& cache(int m) const { return m < 0 ? *ref_ : *caches_[m]; }

  // Feeds tokens[w] at position `pos` (the next one: 0, 1, ...) to every cache. With want_logits,
  // logits becomes [(1 + n_methods) * n_streams, n_vocab]: row (m + 1) * n_streams + w is method
  // m's (row w the reference's) next-token logits for stream w. Error when a budget cannot hold
  // the step (names the method).
  void step(const std::vector<int32_t>& tokens, int pos, bool want_logits, std::vector<float>& logits);

 private:
  const Model& model_;
  std::vector<EvalMethod> methods_;
  int n_streams_;
  int max_len_;
  int caches_per_call_;  // caches whose streams share a forward call (0: all)
  std::unique_ptr<PagedKvCache> ref_;
  std::vector<std::unique_ptr<PagedKvCache>> caches_;
  RoutedKvCache routed_;
  Forward fwd_;
  std::vector<float> part_;
};

}  // namespace mpkv

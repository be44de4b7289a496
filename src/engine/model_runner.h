// The forward pass bound to one KV cache: the single place where a plan's key smoothing reaches
// the forward pass and where prompts are prefilled under a KV budget. The engine steps through
// it; ppl, bench, eval and calibration drive it directly for teacher-forced passes.
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kvcache/kv_memory.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace mpkv {

// Prefill logits: token indices [begin, end) of the prefilled tokens produce logit rows, handed
// over chunk by chunk as on_rows(first_index, n_rows, logits [n_rows, n_vocab]).
struct LogitSpan {
  size_t begin = 0, end = 0;
  static LogitSpan last(size_t n) { return {n - 1, n}; }
};
using LogitRowsFn = std::function<void(size_t first_index, size_t n_rows, const float* logits)>;

class ModelRunner {
 public:
  // Both apply the key smoothing of `cache`'s plan (KvCache::key_smoothing), if any. A cache that
  // is a KvCache alone (F16KvCache, eval's fake-quant caches) has no budget: prefill reserves
  // nothing, every chunk fits.
  ModelRunner(const Model& model, KvCache& cache);
  // A cache that is also a KvMemory (PagedKvCache): prefill reserves every chunk in it first.
  template <class Cache>
    requires std::derived_from<Cache, KvCache> && std::derived_from<Cache, KvMemory>
  ModelRunner(const Model& model, Cache& cache) : ModelRunner(model, cache, &cache) {}

  // Runs one batch through the forward pass; in a budgeted cache every sequence in it must have
  // reserved room for its tokens (KvMemory::reserve). logits: [rows with BatchToken::logits, n_vocab].
  void run(const std::vector<BatchToken>& batch, std::vector<float>& logits);

  // Appends tokens at positions pos0.. of seq in chunks of at most max_chunk tokens; each chunk
  // is reserved first and halved while the cache cannot reserve it (a budgeted progressive cache
  // shrinks pages between chunks). Returns the number of tokens appended: fewer than
  // tokens.size() only when not even one more token can be reserved.
  size_t prefill(int seq, std::span<const int32_t> tokens, int pos0, int max_chunk, LogitSpan want,
                 const LogitRowsFn& on_rows);

  Forward& forward() { return fwd_; }
  KvCache& cache() { return cache_; }
  const Model& model() const { return model_; }

 private:
  ModelRunner(const Model& model, KvCache& cache, KvMemory* memory);

  const Model& model_;
  KvCache& cache_;
  KvMemory* memory_;  // the same cache's reservations; null: no budget
  Forward fwd_;
  std::vector<float> logits_;
  std::vector<BatchToken> batch_;
};

}  // namespace mpkv

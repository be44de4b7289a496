// The forward pass bound to one KV cache: the single place where a plan's key smoothing reaches
// the forward pass and where prompts are prefilled under a KV budget. The engine steps through
// it; ppl, bench, eval and calibration drive it directly for teacher-forced passes.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"

namespace mpkv {

enum class LogitRows : uint8_t { last, all };  // which prefill positions produce logits

class ModelRunner {
 public:
  // Applies the key smoothing of `cache`'s plan when it is a PagedKvCache (kv_plan.h), else none.
  ModelRunner(const Model& model, KvCache& cache);

  // Runs one batch through the forward pass; every sequence in it must have reserved room for
  // its tokens (KvCache::reserve). logits: [rows with BatchToken::logits, n_vocab].
  void run(const std::vector<BatchToken>& batch, std::vector<float>& logits);

  // Appends tokens at positions pos0.. of seq in chunks of at most max_chunk tokens; each chunk
  // is reserved first and halved while the cache cannot reserve it (a budgeted progressive cache
  // shrinks pages between chunks). Returns the number of tokens appended: fewer than
  // tokens.size() only when not even one more token can be reserved. logits gets
  // [1, n_vocab] for the last token (LogitRows::last) or [appended, n_vocab] (LogitRows::all).
  size_t prefill(int seq, std::span<const int32_t> tokens, int pos0, int max_chunk, LogitRows rows,
                 std::vector<float>& logits);

  Forward& forward() { return fwd_; }
  KvCache& cache() { return cache_; }
  const Model& model() const { return model_; }

 private:
  const Model& model_;
  KvCache& cache_;
  Forward fwd_;
  std::vector<float> chunk_logits_;
};

}  // namespace mpkv

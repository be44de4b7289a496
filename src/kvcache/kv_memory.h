// What the engine's scheduler (engine/scheduler.h) sees of a KV cache: its byte model and budget,
// the operations admission, reservation and preemption need, and the prefix cache's lookups and
// references (shared, reference-counted pages that shrink before they are evicted: docs/serving.md
// "Prefix cache"). PagedKvCache implements it; the scheduler never sees pages. The one declaration
// of reserve and remove: a prefill under a budget (engine/ModelRunner) and the lockstep decoder
// (eval/) reserve here too; a cache without a budget (F16KvCache, eval's fake-quant caches) is a
// KvCache alone, whose every pass fits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kvcache/kv_byte_model.h"

namespace mpkv {

// What the prefix cache holds of a token sequence (KvMemory::prefix_match).
struct PrefixMatch {
  int tokens = 0;             // leading positions whose KV is cached (0: none)
  size_t cold_bytes = 0;      // bytes of those blocks that only the cache holds now (evictable)
  size_t unpinned_bytes = 0;  // their bytes at final bits not yet in prefix_pinned_bytes()
};

class KvMemory {
 public:
  virtual ~KvMemory() = default;

  // Every byte figure: a request's footprint, the bound for n tokens (kv_byte_model.h).
  virtual const KvByteModel& byte_model() const = 0;
  virtual size_t budget_bytes() const = 0;  // 0: unlimited
  virtual size_t bytes_used() const = 0;
  // Bytes that could be charged now with every shrinkable page at its floor (SIZE_MAX: no budget).
  virtual size_t available_bytes() const = 0;

  // Room for the next n_tokens positions of seq in every layer, set aside so the forward pass
  // cannot run out half-way (shrinking other pages first); false, with nothing changed, when they
  // cannot fit even then, and the caller decides (the engine's scheduler preempts a sequence, a
  // one-sequence run stops).
  virtual bool reserve(int seq, int n_tokens) = 0;
  // Frees everything held for seq (unknown: nothing happens).
  virtual void remove(int seq) = 0;
  // Frees room until `bytes` are freed or nothing more can go, in the cache's order (cold cached
  // pages shrink, cold cached blocks are evicted, then running pages shrink); returns the bytes freed.
  virtual size_t shrink(size_t bytes) = 0;

  // Prefix cache (all no-ops while it is off). prefix_match: what attach_prefix would give a new
  // sequence with these tokens now (at most n - 1 positions: one token is always computed).
  virtual bool prefix_cache_enabled() const = 0;
  virtual PrefixMatch prefix_match(const int32_t* tokens, int n) const = 0;
  // Creates sequence seq (unknown until now) reading the matched blocks' pages and sink rows;
  // returns the positions it holds (0: none matched or no room: seq is not created).
  virtual int attach_prefix(int seq, const int32_t* tokens, int n) = 0;
  // Caches the full pages of seq's first n positions (tokens[0, n)) not cached yet: after every
  // forward pass. They stay cached, unreferenced, after seq is removed.
  virtual void publish_prefix(int seq, const int32_t* tokens, int n) = 0;
  // Bytes, at final bits, of cached blocks some sequence reads without having written them: what
  // admission adds once to the projected bytes of running sequences (which leave them out).
  virtual size_t prefix_pinned_bytes() const = 0;
};

}  // namespace mpkv

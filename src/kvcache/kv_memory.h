// What the engine's scheduler (engine/scheduler.h) sees of a KV cache: its byte model and budget,
// and the four operations admission, reservation and preemption need. PagedKvCache implements it.
// Kept small on purpose: a prefix cache (shared, reference-counted pages that shrink before they
// are evicted) grows it with lookups and references, not the scheduler with cache internals.
#pragma once
#include <cstddef>

#include "kvcache/kv_byte_model.h"

namespace mpkv {

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
  // cannot fit even then.
  virtual bool reserve(int seq, int n_tokens) = 0;
  // Frees everything held for seq (unknown: nothing happens).
  virtual void remove(int seq) = 0;
  // Shrinks pages until `bytes` are freed or nothing can shrink; returns the bytes freed.
  virtual size_t shrink(size_t bytes) = 0;
};

}  // namespace mpkv

// The reservation policy of prefill and scheduling: how many of a sequence's next tokens to give the
// next forward pass when the KV cache cannot take them all.
#pragma once
#include "kvcache/kv_memory.h"

namespace mpkv {

// Reserves room in `memory` for the next n tokens of seq, or for n/2, n/4, ... 1 of them while they
// do not fit (fewer tokens need fewer fresh pages at once, and a budgeted cache shrinks pages in
// between). Returns the count reserved; 0 when not even one token fits. The one copy of this loop:
// prefill (engine/ModelRunner), the engine's scheduler and the synthetic fills of `mpkv bench`.
inline int reserve_halving(KvMemory& memory, int seq, int n) {
  for (; n >= 1; n /= 2)
    if (memory.reserve(seq, n)) return n;
  return 0;
}

}  // namespace mpkv

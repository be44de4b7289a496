// Bytes a quantized KV cache needs for max_len tokens of one allocation component (a layer's
// KV heads, or one KV head), at a given bit-width: what PM-KVQ's budget constraint and every
// memory figure mpkv prints count (DESIGN.md principle 5: codes, scales, zeros, sink, window).
#pragma once
#include <cstdint>

namespace mpkv {

// Shape of one allocation component. Per-token min-max layout (ALGORITHMS.md 1): one fp16 scale
// and one fp16 zero per token per group of `group` channels along head_dim.
struct KvMemorySpec {
  int head_dim = 64;
  int group = 0;          // channels per (scale, zero) group; 0 = head_dim (PM-KVQ's G)
  int heads = 1;          // KV heads in the component: n_kv_heads (per layer) or 1 (per head)
  int tensors = 2;        // 2 = keys and values (PM-KVQ: Mem(K) + Mem(V)); 1 = K or V alone (RateQuant)
  int64_t max_len = 0;    // tokens the budget is solved for
  int sink = 1;           // first tokens, kept at 16 bits
  int window = 128;       // recent tokens, kept at 16 bits (the whole window counts: worst case)
};

// Validates the spec (head_dim > 0 and a multiple of 8, group divides head_dim, heads/tensors >= 1,
// max_len >= 1, sink/window >= 0); throws Error naming the bad field.
void validate(const KvMemorySpec& s);

// Bytes of one token row of one head of one tensor at `bits`: codes plus fp16 scale and zero per group.
//   row_bytes(b) = head_dim * b / 8 + (head_dim / G) * (2 + 2)
// bits must be 1, 2, 3, 4, 8 or 16 (head_dim % 8 == 0 makes every row a whole number of bytes).
int64_t kv_row_bytes(const KvMemorySpec& s, int bits);

// Bytes of the component for max_len tokens with the body at `bits`:
//   n16   = min(max_len, sink + window)        tokens kept at 16 bits
//   nb    = max_len - n16                      tokens at `bits`
//   bytes = heads * tensors * (nb * row_bytes(bits) + n16 * row_bytes(16))
// The 16-bit tokens are counted as uint16 codes with their scale and zero (the top of the
// 16 -> 8 -> 4 -> 2 ladder, ALGORITHMS.md 2), never less than an fp16 copy would take, so a budget met
// under this count is met by the cache. Page and page-table metadata are not part of it.
int64_t kv_component_bytes(const KvMemorySpec& s, int bits);

}  // namespace mpkv

// PM-KVQ's equivalent right shift (docs/algorithms.md §2): a 2b-bit min-max code becomes a b-bit code
// of the same group without dequantizing,
//   X_b = ((2^{2b} - 2^b + 1) * (X_{2b} + 2^{b-1})) >> 3b,   Z_b = Z_{2b},   S_b = (2^b + 1) S_{2b}.
// In exact arithmetic this is round-half-up requantization of the dequantized value:
//   X_b = floor(X_{2b} / (2^b + 1) + 1/2) = floor((X_{2b} + 2^{b-1}) / (2^b + 1))
// (2^b + 1 is odd, so X_{2b} / (2^b + 1) never sits exactly on a half and the two agree; the
// paper's appendix D proves the shift form). The largest code maps to the largest code:
// 2^{2b} - 1 = (2^b - 1)(2^b + 1), so no clamp is needed and [min, max] stays covered.
// The product needs 64 bits in general (the paper's note for 16 -> 8); callers pass b = 1, 2, 4, 8.
#pragma once
#include <cstdint>

namespace mpkv {

// X_b from X_{2b}; b in {1, 2, 4, 8}, x2b < 2^{2b}.
static inline uint32_t equivalent_shift_code(uint32_t x2b, int b) {
  const uint64_t mul = (1ull << (2 * b)) - (1ull << b) + 1ull;
  return (uint32_t)((mul * ((uint64_t)x2b + (1ull << (b - 1)))) >> (3 * b));
}

// S_b / S_{2b} (exact in fp32: an integer <= 257). The shrink does not store S_b: the block keeps
// S_{2b}'s stored value and its layout's scale_mult takes this factor (kv_block_layout.h).
static inline float equivalent_shift_scale_factor(int b) { return (float)((1u << b) + 1u); }

}  // namespace mpkv

// Scale and zero point of one asymmetric min-max group, and the code rule every kernel variant
// shares (docs/algorithms.md §1):
//   Z = fp16_round_down(min),  S = fp16_round_up(max((max - Z) / (2^b - 1), 2^-24))
//   X_q = clamp(floor((X - Z) / S + 1/2), 0, 2^b - 1)     (round half up, as the shift needs)
//   X_hat = X_q * S + Z
// Rounding Z down and S up keeps [min, max] inside the grid after fp16 storage. S is clamped to
// the smallest positive fp16 (2^-24) so 1/S is finite for a constant group. Inputs are clamped to
// fp16's +-65504 (the range an fp16 KV cache has); NaN inputs give code 0.
// All code is computed in fp32 with these exact operations (subtract, divide, add 0.5, floor), so
// SIMD variants that use the same operations produce bit-identical codes.
#pragma once
#include <cmath>
#include <cstdint>

#include "util/fp16.h"

namespace mpkv {

inline constexpr float kFp16Max = 65504.0f;
inline constexpr float kMinScale = 5.9604645e-08f;  // 2^-24, the smallest positive fp16

struct UniformGroupParams {
  uint16_t scale_h, zero_h;  // as stored
  float scale, zero;         // the same values in fp32 (what every kernel computes with)
};

// Out of line on purpose: ISA-flagged translation units call this one copy (see kv_block_layout.h).
UniformGroupParams uniform_group_params(float lo, float hi, int bits);

// IEEE half rounding toward -inf / +inf (the reference for F16C's _MM_FROUND_TO_NEG_INF / POS_INF).
uint16_t fp16_round_down(float f);
uint16_t fp16_round_up(float f);

// The code of x in a group with fp32 scale s and zero z (see the rule above).
static inline uint32_t uniform_code(float x, float s, float z, float qmax) {
  float t = std::floor((x - z) / s + 0.5f);
  if (!(t >= 0.0f)) t = 0.0f;  // also NaN -> 0
  if (t > qmax) t = qmax;
  return (uint32_t)t;
}

}  // namespace mpkv

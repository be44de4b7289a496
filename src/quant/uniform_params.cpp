#include "quant/uniform_params.h"

#include <algorithm>

namespace mpkv {

namespace {
// Next representable half below / above h (h not NaN). -65504 steps to -inf and 65504 to +inf.
uint16_t fp16_next_down(uint16_t h) {
  if (h == 0x0000) return 0x8001;    // +0 -> -2^-24
  if (h & 0x8000) return (uint16_t)(h + 1);  // negative: larger magnitude
  return (uint16_t)(h - 1);
}
uint16_t fp16_next_up(uint16_t h) {
  if (h == 0x8000) return 0x0001;    // -0 -> +2^-24
  if (h & 0x8000) return (uint16_t)(h - 1);
  return (uint16_t)(h + 1);
}
}  // namespace

uint16_t fp16_round_down(float f) {
  uint16_t h = fp32_to_fp16(f);
  if (fp16_to_fp32(h) > f) h = fp16_next_down(h);
  return h;
}

uint16_t fp16_round_up(float f) {
  uint16_t h = fp32_to_fp16(f);
  if (fp16_to_fp32(h) < f) h = fp16_next_up(h);
  return h;
}

UniformGroupParams uniform_group_params(float lo, float hi, int bits) {
  // + 0.0f turns -0 into +0, so min/max reductions that disagree on the sign of zero store the same Z.
  lo = std::clamp(lo + 0.0f, -kFp16Max, kFp16Max);
  hi = std::clamp(hi + 0.0f, -kFp16Max, kFp16Max);
  if (!(lo == lo)) lo = 0.0f;
  if (!(hi >= lo)) hi = lo;
  UniformGroupParams p;
  p.zero_h = fp16_round_down(lo);
  p.zero = fp16_to_fp32(p.zero_h);
  const float levels = (float)((1u << bits) - 1u);
  float s = (hi - p.zero) / levels;
  s = std::clamp(s, kMinScale, kFp16Max);
  p.scale_h = fp16_round_up(s);
  p.scale = fp16_to_fp32(p.scale_h);
  return p;
}

}  // namespace mpkv

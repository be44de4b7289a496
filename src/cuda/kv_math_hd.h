// The per-element math of the CUDA kernels, shared with the host (MPKV_HD, cuda/hd.h): min-max
// group parameters and codes (quantize-on-append), the equivalent right shift of packed code
// bytes (shrink) and the online-softmax state (decode attention). Each helper restates a CPU
// definition and is tested against it on the CPU (tests/unit/test_cuda_math.cpp):
//   group_params / uniform_code_of   quant/uniform_params.{h,cpp}   (bit-identical params and codes)
//   quantize_token_group / _channel_run   quantize_ref               (bit-identical blocks)
//   shift_code / shrink_code_byte    quant/equivalent_shift.h, shrink_ref (bit-identical)
//   SoftmaxState::merge              softmax_partial_merge           (same formula)
#pragma once
#include <cmath>
#include <cstdint>

#include "cuda/device_block_layout.h"

namespace mpkv::cuda {

inline constexpr float kHalfMax = 65504.0f;
inline constexpr float kHalfMinScale = 5.9604645e-08f;  // 2^-24

struct GroupParams {
  uint16_t scale_h, zero_h;  // as stored
  float scale, zero;         // the same in fp32
};

MPKV_HD float clamp_keep_nan(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

// uniform_group_params (quant/uniform_params.cpp): Z = fp16 down(min), S = fp16 up((max - Z) / (2^b - 1)).
MPKV_HD GroupParams group_params(float lo, float hi, int bits) {
  lo = clamp_keep_nan(lo + 0.0f, -kHalfMax, kHalfMax);
  hi = clamp_keep_nan(hi + 0.0f, -kHalfMax, kHalfMax);
  if (!(lo == lo)) lo = 0.0f;
  if (!(hi >= lo)) hi = lo;
  GroupParams p;
  p.zero_h = float_to_half_down(lo);
  p.zero = half_to_float(p.zero_h);
  const float levels = (float)((1u << bits) - 1u);
  float s = (hi - p.zero) / levels;
  s = clamp_keep_nan(s, kHalfMinScale, kHalfMax);
  p.scale_h = float_to_half_up(s);
  p.scale = half_to_float(p.scale_h);
  return p;
}

// uniform_code: clamp(floor((x - z) / s + 1/2), 0, qmax); NaN -> 0.
MPKV_HD uint32_t uniform_code_of(float x, float s, float z, float qmax) {
  float t = floor_f((x - z) / s + 0.5f);
  if (!(t >= 0.0f)) t = 0.0f;
  if (t > qmax) t = qmax;
  return (uint32_t)t;
}

MPKV_HD void min_max_step(float x, float& lo, float& hi) {
  lo = x < lo ? x : lo;  // std::min(lo, x), NaN handling included
  hi = hi < x ? x : hi;  // std::max(hi, x)
}

// Token axis: the channel group [g0, g0 + L.group) of token row t; x(c) gives channel c's value.
// Writes its scale, zero and codes (whole bytes: group % 8 == 0, so one thread may own them).
template <class RowValue>
MPKV_HD void quantize_token_group(const DeviceBlockLayout& L, uint8_t* blk, int t, int g0, RowValue x) {
  float lo = x(g0), hi = lo;
  for (int c = g0; c < g0 + L.group; ++c) min_max_step(x(c), lo, hi);
  const GroupParams p = group_params(lo, hi, L.bits);
  const uint32_t pi = param_index_at(L, t, g0);
  store_u16(blk + L.scales_offset + 2 * (size_t)pi, p.scale_h);
  store_u16(blk + L.zeros_offset + 2 * (size_t)pi, p.zero_h);
  const float qmax = (float)((1u << L.bits) - 1u);
  for (int c = g0; c < g0 + L.group; ++c) set_code_at(L, blk, t, c, uniform_code_of(x(c), p.scale, p.zero, qmax));
}

// Channel axis (KIVI keys): channels [c0, c0 + 8) of the token group starting at row t0
// (t0 % L.group == 0); x(i, c) gives row t0 + i, channel c. The 8 codes of a row are `bits` whole
// bytes, so one thread may own the run.
template <class GroupValue>
MPKV_HD void quantize_channel_run(const DeviceBlockLayout& L, uint8_t* blk, int t0, int c0, GroupValue x) {
  const float qmax = (float)((1u << L.bits) - 1u);
  for (int c = c0; c < c0 + 8; ++c) {
    float lo = x(0, c), hi = lo;
    for (int i = 0; i < L.group; ++i) min_max_step(x(i, c), lo, hi);
    const GroupParams p = group_params(lo, hi, L.bits);
    const uint32_t pi = param_index_at(L, t0, c);
    store_u16(blk + L.scales_offset + 2 * (size_t)pi, p.scale_h);
    store_u16(blk + L.zeros_offset + 2 * (size_t)pi, p.zero_h);
    for (int i = 0; i < L.group; ++i) set_code_at(L, blk, t0 + i, c, uniform_code_of(x(i, c), p.scale, p.zero, qmax));
  }
}

// equivalent_shift_code (quant/equivalent_shift.h): X_b = ((2^2b - 2^b + 1)(X_2b + 2^(b-1))) >> 3b.
MPKV_HD uint32_t shift_code(uint32_t x2b, int b) {
  const uint64_t mul = (1ull << (2 * b)) - (1ull << b) + 1ull;
  return (uint32_t)((mul * ((uint64_t)x2b + (1ull << (b - 1)))) >> (3 * b));
}

// Packed codes at 2b bits -> b bits, b in {1, 2, 4, 8}: destination code byte k is a function of
// source code bytes 2k and 2k + 1 alone (both hold 16 bits of codes, little-endian bit order,
// kv_block_layout.h), for every row of the block since rows are byte-aligned and back to back.
MPKV_HD uint8_t shrink_code_byte(uint32_t src_lo, uint32_t src_hi, int b) {
  const uint32_t w = src_lo | (src_hi << 8);
  const uint32_t mask2b = (b == 8) ? 0xffffu : ((1u << (2 * b)) - 1u);
  uint32_t out = 0;
  for (int k = 0; k < 8 / b; ++k) out |= shift_code((w >> (2 * b * k)) & mask2b, b) << (b * k);
  return (uint8_t)out;
}

// Online-softmax state of one query over some cache rows: m = max score, l = sum exp(s - m),
// acc = sum exp(s - m) v (acc kept by the caller, `n` floats). An empty state has m = -inf, l = 0.
// merge_weights gives the factors for (a, b) so that a := a * wa + b * wb; an empty side weighs 0
// (the CPU merge would compute exp(-inf - -inf) = NaN there; its callers never merge two empty states).
struct MergeWeights {
  float m, wa, wb;
};
MPKV_HD MergeWeights merge_weights(float ma, float mb) {
  const float m = ma > mb ? ma : mb;
  MergeWeights w;
  w.m = m;
  w.wa = (ma == -INFINITY) ? 0.0f : exp_f(ma - m);
  w.wb = (mb == -INFINITY) ? 0.0f : exp_f(mb - m);
  return w;
}

}  // namespace mpkv::cuda

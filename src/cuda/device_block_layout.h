// One KV block as the CUDA kernels see it: the same bytes as a CPU block (quant/kv_block_layout.h
// for quantized blocks; fp16 rows [tokens][head_dim] for fp16 components, as PagedKvCache stores
// them), described by a plain struct that device code can copy (docs/cuda.md, "Page store").
// A block copied byte for byte from host to device therefore decodes to the same values.
//
// Formats (closed set): fp16 rows; uniform min-max codes with per-token channel groups (uniform,
// KIVI values); uniform codes with per-channel token groups (KIVI keys). Lloyd-Max (turbo) and
// rotated components are CPU-only for now (to_device_layout says so).
#pragma once
#include <cstdint>

#include "cuda/hd.h"

namespace mpkv {
struct KvBlockLayout;
}

namespace mpkv::cuda {

// Layouts per component in the device layout table: [component][bits], bits 0..16.
inline constexpr int kBitsSlots = 17;

enum class BlockFormat : int32_t { f16_rows = 0, uniform_token = 1, uniform_channel = 2 };

// Offsets are bytes from the block start; everything fits 32 bits (a block is one KV head of one
// page: at most 2^24 tokens x 4096 channels x 2 bytes is the CPU's bound, far above real pages).
struct DeviceBlockLayout {
  BlockFormat format = BlockFormat::f16_rows;
  int32_t bits = 16;  // code width (16 for fp16 rows)
  int32_t head_dim = 0;
  int32_t tokens = 0;
  int32_t group = 0;         // channels per group (token axis) or tokens per group (channel axis)
  float scale_mult = 1.0f;   // true scale = stored fp16 scale * scale_mult (kv_block_layout.h)
  uint32_t row_bytes = 0;    // code bytes per token row
  uint32_t scales_offset = 0, zeros_offset = 0;
  uint32_t n_params = 0;     // scales; zeros are as many
  uint32_t bytes = 0;        // the whole block
};

// The descriptor of a quantized CPU block (Error for Lloyd-Max codes), and of an fp16-rows block.
DeviceBlockLayout to_device_layout(const KvBlockLayout& L);
DeviceBlockLayout f16_rows_layout(int head_dim, int tokens);

// Code (t, c) of a packed block: the CPU's get_code (kv_block_layout.h), same bit order.
MPKV_HD uint32_t code_at(const DeviceBlockLayout& L, const uint8_t* blk, int t, int c) {
  const uint32_t bit = (uint32_t)c * (uint32_t)L.bits;
  const uint8_t* b = blk + (size_t)t * L.row_bytes + bit / 8;
  const int shift = (int)(bit % 8);
  uint32_t w = b[0];
  if (shift + L.bits > 8) w |= (uint32_t)b[1] << 8;
  return (w >> shift) & ((1u << L.bits) - 1u);
}

// Writes code (t, c); read-modify-write of its byte(s), so one thread must own them.
MPKV_HD void set_code_at(const DeviceBlockLayout& L, uint8_t* blk, int t, int c, uint32_t code) {
  const uint32_t bit = (uint32_t)c * (uint32_t)L.bits;
  uint8_t* b = blk + (size_t)t * L.row_bytes + bit / 8;
  const int shift = (int)(bit % 8);
  const uint32_t mask = ((1u << L.bits) - 1u) << shift;
  const uint32_t v = (code << shift) & mask;
  b[0] = (uint8_t)((b[0] & ~mask) | v);
  if (shift + L.bits > 8) b[1] = (uint8_t)((b[1] & ~(mask >> 8)) | (v >> 8));
}

// Index of the (scale, zero) pair code (t, c) uses.
MPKV_HD uint32_t param_index_at(const DeviceBlockLayout& L, int t, int c) {
  if (L.format == BlockFormat::uniform_token) return (uint32_t)t * (uint32_t)(L.head_dim / L.group) + (uint32_t)(c / L.group);
  return (uint32_t)(t / L.group) * (uint32_t)L.head_dim + (uint32_t)c;
}

// True scale (stored fp16 times scale_mult) and zero of parameter pi.
MPKV_HD float scale_at(const DeviceBlockLayout& L, const uint8_t* blk, uint32_t pi) {
  return half_to_float(load_u16(blk + L.scales_offset + 2 * (size_t)pi)) * L.scale_mult;
}
MPKV_HD float zero_at(const DeviceBlockLayout& L, const uint8_t* blk, uint32_t pi) {
  return half_to_float(load_u16(blk + L.zeros_offset + 2 * (size_t)pi));
}

// x_hat(t, c): fp16 rows as stored; codes as the CPU reference decodes them,
// code * (S * scale_mult) + Z, rounded after the multiply and after the add (never fused).
MPKV_HD float dequant_at(const DeviceBlockLayout& L, const uint8_t* blk, int t, int c) {
  if (L.format == BlockFormat::f16_rows) return half_to_float(load_u16(blk + 2 * ((size_t)t * L.head_dim + c)));
  const uint32_t pi = param_index_at(L, t, c);
  return mul_add_unfused((float)code_at(L, blk, t, c), scale_at(L, blk, pi), zero_at(L, blk, pi));
}

// x[k] = x_hat(t, c0 + k) for k < n <= MaxN: dequant_at for n consecutive channels of one row (a
// decode lane's share), reading each scale and zero once per run of channels that share it (token
// axis: a channel group; channel axis: every channel has its own). Identical values to dequant_at.
// MaxN is a compile-time bound so the device keeps x in registers (loops unrolled, k < n guarded).
template <int MaxN>
MPKV_HD void dequant_run(const DeviceBlockLayout& L, const uint8_t* blk, int t, int c0, int n, float (&x)[MaxN]) {
  if (L.format == BlockFormat::f16_rows) {
    const uint8_t* row = blk + 2 * ((size_t)t * L.head_dim + c0);
    MPKV_UNROLL
    for (int k = 0; k < MaxN; ++k)
      if (k < n) x[k] = half_to_float(load_u16(row + 2 * k));
    return;
  }
  uint32_t pi = param_index_at(L, t, c0);
  float s = scale_at(L, blk, pi), z = zero_at(L, blk, pi);
  MPKV_UNROLL
  for (int k = 0; k < MaxN; ++k) {
    if (k >= n) break;
    const uint32_t pk = param_index_at(L, t, c0 + k);
    if (pk != pi) pi = pk, s = scale_at(L, blk, pi), z = zero_at(L, blk, pi);
    x[k] = mul_add_unfused((float)code_at(L, blk, t, c0 + k), s, z);
  }
}

}  // namespace mpkv::cuda

// The layout of one quantized KV block: P tokens x head_dim of ONE KV head, codes + scales + zeros.
// A paged cache stores one such block per KV head per page (heads may differ in bits); kernels see
// only this descriptor and the block's bytes.
//
// Bytes of a block, three sections, no padding (loads are unaligned-safe memcpy / loadu):
//   [codes_offset, +codes_bytes)    codes, token-major: row t = head_dim codes packed at `bits`,
//                                   row_bytes = head_dim * bits / 8 (head_dim % 8 == 0, so rows and
//                                   8-code runs always start on a byte).
//   [scales_offset, +2*n_params)    fp16 scales (uniform) or fp16 vector norms ||x|| (lloyd_max)
//   [zeros_offset,  +2*n_zeros)     fp16 zero points (uniform); empty for lloyd_max
//
// Parameter shape by axis:
//   GroupAxis::token    per-token groups of `group` channels: params [tokens][head_dim / group]
//   GroupAxis::channel  per-channel groups of `group` tokens (KIVI keys): params [tokens / group][head_dim]
//   Codec::lloyd_max    one norm per token: params [tokens], no zeros
//
// Code packing within a row (little-endian bit order everywhere; code j of the row):
//   16  uint16 little-endian at byte 2j
//    8  byte j
//    4  byte j/2, low nibble for even j, high nibble for odd j
//    2  byte j/4, bits 2*(j%4)..+1
//    1  byte j/8, bit j%8
//    3  8 codes in 3 bytes: the 24-bit little-endian word at byte 3*(j/8) holds code j at bits
//       3*(j%8)..+2 (so a code may straddle two bytes; offset_of reports the first byte and shift)
// For bits <= 4 this is one rule: 8 consecutive codes form a little-endian word of `bits` bytes,
// code k of the 8 at bit k*bits; SIMD kernels decode it with one broadcast and a variable shift.
//
// Why fp16 scales and zeros, not fp32: they cost 2 * 16 / G bits per element, 0.5 bit at G = 64
// (0.25 at G = 128), against 1.0 bit for fp32 -- at 2-bit codes that is 2.5 vs 3.0 bits per element,
// 20% more memory for fp32. The precision lost is bounded: the zero is rounded DOWN and the scale UP
// to fp16 (see uniform_group_params), so the grid Z + k S, k = 0..2^b-1, still covers [min, max] and
// the error stays <= S/2 with S at most 2^-10 relative larger than the exact one. Below
// S = 2^-14 (fp16 subnormals; at 16 bits that is a group range below ~4) the scale has fewer
// significant bits and the 16-bit grid gets coarser (range 0.01: ~15.8 effective bits), which is
// still finer than fp16 storage of the values themselves. Values beyond fp16's +-65504 saturate.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mpkv {

enum class GroupAxis { token, channel };
enum class Codec { uniform, lloyd_max };

// Where code (token, channel) sits: its first byte (relative to the block start) and the bit
// shift inside the little-endian word starting there. For bits 16 the word is 2 bytes.
struct CodePos {
  size_t byte;
  int shift;
};

struct KvBlockLayout {
  Codec codec = Codec::uniform;
  GroupAxis axis = GroupAxis::token;
  int bits = 0;
  int head_dim = 0;
  int tokens = 0;      // P
  int group = 0;       // channels per group (token axis) or tokens per group (channel axis)
  // Uniform codec: the true scale is the stored fp16 scale times scale_mult. A block quantized
  // directly has scale_mult 1. A block that descends from a wider one by equivalent right shifts
  // keeps the scale it was quantized with (the shift copies scales and zeros unchanged) and its
  // layout carries the exact product of the ladder's factors (2^b + 1) instead (halved_layout):
  //   16 -> 8: 257,  -> 4: 257 * 17 = 4369,  -> 2: 4369 * 5 = 21845,  -> 1: 21845 * 3 = 65535,
  // i.e. (2^16 - 1) / (2^b - 1) from 16 bits. Every product is an integer below 2^24, so fp32 holds
  // it exactly, and the dequantized value code * (S * scale_mult) + Z is the value of the 16-bit
  // codes requantized straight to b bits (docs/numerics.md, "Exact ladder scales"), with no fp16
  // rounding of the shrunk scale. Why not store the product in fp16 (the old scheme): fp16(S * 257)
  // is off by up to 2^-11 relative and the error compounds down the ladder; why not fp32 scales in
  // shrunk blocks: the block would change size per width beyond its codes, and scale_mult costs no
  // byte. Every kernel that reads a scale multiplies by it once per group (Lloyd-Max norms: 1).
  float scale_mult = 1.0f;
  size_t row_bytes = 0;
  size_t codes_offset = 0, codes_bytes = 0;
  size_t scales_offset = 0, zeros_offset = 0;
  size_t n_params = 0;  // scales (fp16 each)
  size_t n_zeros = 0;   // zeros (fp16 each): n_params, or 0 for lloyd_max
  size_t bytes = 0;     // the whole block

  // Number of (scale, zero) groups per token row (token axis) / per token group (channel axis).
  int groups_per_row() const { return axis == GroupAxis::token ? head_dim / group : head_dim; }
  CodePos offset_of(int token, int channel) const {
    const size_t bit = (size_t)channel * bits;
    return CodePos{codes_offset + (size_t)token * row_bytes + bit / 8, (int)(bit % 8)};
  }
  // Index of the scale (and zero) that code (token, channel) uses.
  size_t param_index(int token, int channel) const {
    if (codec == Codec::lloyd_max) return (size_t)token;
    if (axis == GroupAxis::token) return (size_t)token * (head_dim / group) + channel / group;
    return (size_t)(token / group) * head_dim + channel;
  }
  double bits_per_element() const { return 8.0 * (double)bytes / ((double)tokens * head_dim); }
};

// Builds the descriptor; throws Error unless bits / head_dim / group / tokens fit the codec and axis
// (uniform: bits 1,2,3,4,8,16; lloyd_max: 1..4 with group == head_dim; token axis: group divides
// head_dim and is a multiple of 8; channel axis: group divides tokens; head_dim % 8 == 0; tokens >= 1).
KvBlockLayout make_kv_block_layout(Codec codec, GroupAxis axis, int bits, int head_dim, int tokens, int group);

// Throws Error unless tokens [t0, t0 + n) lie in the block and, for the channel axis, cover whole
// token groups (a per-channel group is quantized only once all its G tokens exist).
void check_token_range(const KvBlockLayout& L, int t0, int n);

// Code access, the reference for every packed format (static: internal linkage in every
// translation unit, so ISA-flagged files never share a copy with plain ones).
static inline uint32_t get_code(const KvBlockLayout& L, const uint8_t* block, int token, int channel) {
  const CodePos p = L.offset_of(token, channel);
  const uint8_t* b = block + p.byte;
  uint32_t w = b[0];
  if (p.shift + L.bits > 8) w |= (uint32_t)b[1] << 8;
  return (w >> p.shift) & ((1u << L.bits) - 1u);
}

static inline void set_code(const KvBlockLayout& L, uint8_t* block, int token, int channel, uint32_t code) {
  const CodePos p = L.offset_of(token, channel);
  uint8_t* b = block + p.byte;
  const uint32_t mask = ((1u << L.bits) - 1u) << p.shift;
  const uint32_t v = (code << p.shift) & mask;
  b[0] = (uint8_t)((b[0] & ~mask) | v);
  if (p.shift + L.bits > 8) b[1] = (uint8_t)((b[1] & ~(mask >> 8)) | (v >> 8));
}

static inline uint16_t load_half(const uint8_t* block, size_t offset, size_t index) {
  uint16_t h;
  std::memcpy(&h, block + offset + 2 * index, 2);
  return h;
}
static inline void store_half(uint8_t* block, size_t offset, size_t index, uint16_t h) {
  std::memcpy(block + offset + 2 * index, &h, 2);
}

}  // namespace mpkv

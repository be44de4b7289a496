// The KV block kernels and their per-ISA table (docs/design.md §1-3).
//
// Every kernel takes a KvBlockLayout and a block's bytes and works on tokens [t0, t0 + n) of it
// (check_token_range states the preconditions; callers check, kernels do not). Vectors are in CODE
// SPACE: for rotated / turbo the caller applies the transform (KvQuantizer::to_code_space) first.
//
//   quantize     x [n, head_dim] (row stride ldx floats) -> codes + params of tokens [t0, t0+n)
//   dequantize   tokens [t0, t0+n) -> y [n, head_dim] (row stride ldy)
//   shrink       whole block at 2b bits -> whole block at b bits (equivalent right shift; uniform
//                codec only; same tokens / head_dim / group / axis; src and dst must not overlap)
//   dot          out[i] = q . x_hat[t0 + i]           (attention scores against packed keys)
//   accumulate   out[:] += sum_i w[i] * x_hat[t0 + i] (attention output from packed values)
//
// SIMD coverage (everything else in a SIMD table entry forwards to the _ref code, same results):
//   AVX2     uniform codec, token axis, group % 8 == 0, every bit-width 1,2,3,4,8,16:
//            quantize (bit-identical codes and params), dequantize, dot, accumulate;
//            shrink codes for 16->8, 8->4, 4->2, 2->1 (bit-identical), params in scalar.
//   AVX-512  the same with group % 16 == 0.
//   _ref only: KIVI's per-channel axis, Lloyd-Max (turbo) codes.
// Dequantize / dot / accumulate variants may use FMA and other summation orders than _ref: they
// agree to fp32 rounding (tests state the tolerance).
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/kv_block_layout.h"
#include "util/cpu_features.h"

namespace mpkv {

using QuantizeFn = void (*)(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block);
using DequantizeFn = void (*)(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy);
using ShrinkFn = void (*)(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst,
                          uint8_t* dst_block);
using DotFn = void (*)(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out);
using AccumulateFn = void (*)(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n,
                              float* out);

struct QuantKernels {
  Isa isa;
  QuantizeFn quantize;
  DequantizeFn dequantize;
  ShrinkFn shrink;
  DotFn dot;
  AccumulateFn accumulate;
};

// The table for active_isa() (chosen once).
const QuantKernels& quant_kernels();
// The table of one variant (tests and benchmarks); Error when this CPU cannot run it.
const QuantKernels& quant_kernels_for(Isa isa);

// Throws Error unless dst is src at half the bits (uniform codec, bits 2b -> b) with everything else
// equal and dst.scale_mult == src.scale_mult * (2^b + 1) (halved_layout makes such a dst).
void check_shrink_layouts(const KvBlockLayout& src, const KvBlockLayout& dst);

void quantize_ref(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block);
void dequantize_ref(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy);
void shrink_ref(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block);
void dot_ref(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out);
void accumulate_ref(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out);

// Pieces the SIMD variants reuse: params of a shrink (scales and zeros copied unchanged; the
// destination layout's scale_mult carries the factor 2^b + 1), and the code shrink of flat code
// indices [from, to) of the block.
void shrink_params_ref(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block);
void shrink_codes_ref(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block,
                      size_t from, size_t to);

void quantize_avx2(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block);
void dequantize_avx2(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy);
void shrink_avx2(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block);
void dot_avx2(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out);
void accumulate_avx2(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out);

void quantize_avx512(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block);
void dequantize_avx512(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy);
void shrink_avx512(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block);
void dot_avx512(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out);
void accumulate_avx512(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out);

}  // namespace mpkv

// Per-ISA kernel tables for weight matrix-vector products (the decode path's hot loop).
//
// Quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) are multiplied the way
// llama.cpp does it: the activation vector is quantized ONCE into 8-bit blocks of 32 (BlockQ8Act),
// then each weight block meets its activation block in an integer dot product; only the per-block
// results are scaled and summed in fp32. F32 / F16 weights use a plain float dot product.
//
// K-quants (super-blocks of 256) use the same 32-element activation blocks, not llama.cpp's Q8_K
// (one scale per 256): a super-block is 8 activation blocks, and each 32-element piece of it is
// one step of the integer dot with the sub-block scale(s) folded into the integer sum:
//   Q4_K / Q5_K (w = d*sc_k*q - dmin*m_k, q in [0, 15] / [0, 31], sub-block k = activation block k):
//     sum_j w_j x_j = (d*dx) * (sc_k * sum q_j a_j) - (dmin*m_k) * s
//   Q6_K (w = d*sc*(q - 32), q in [0, 63], a scale per 16): the activation block's integer sum is
//     sc_lo * sum_{16 lo} (q-32) a + sc_hi * sum_{16 hi} (q-32) a, times d*dx.
// The integer sums are exact and below 2^24 (Q6_K's worst case: 32 * 32 * 127 * 128 < 2^24), so
// their conversion to fp32 is exact too. Per-32 activation scales also quantize x more finely
// than Q8_K's per-256 scale.
//
// Every kernel has a scalar _ref (matvec_ref.cpp, the specification) and AVX2 / AVX-512 variants
// (matvec_avx2.cpp / matvec_avx512.cpp) that do the same integer math; the variants differ from
// _ref only in the order of the fp32 summation. The table in use is chosen once from
// active_isa() (active_matvec_kernels()); tests fetch each variant's table directly.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"
#include "matvec/matvec_packed.h"
#include "util/cpu_features.h"

namespace mpkv {

constexpr int kActBlock = 32;  // activation block size == block size of all integer-dot weight types

// One activation block: x[j] ~= d * qs[j] for j in [0, 32), with s = d * sum_j qs[j].
// Quantization: amax = max|x|, d = amax / 127, q = round_to_nearest_even(x * (1/d)), so
// |x[j] - d*qs[j]| <= d/2 (plus a few ulps) and qs in [-127, 127].
// s carries the block sum so that weight formats with an offset term cost one multiply per block:
//   Q4_1/Q5_1 (w = dw*q + m):   sum_j w_j x_j = dw*d*sum(q_j*a_j) + m*s
//   Q4_0 (w = dw*(q - 8)):      sum_j w_j x_j = dw*d*sum(q_j*a_j) - 8*dw*s   (Q5_0: 16 instead of 8)
// d and s are fp32 (llama.cpp's block_q8_1 stores fp16; fp32 costs 4 bytes a block and no accuracy).
struct BlockQ8Act {
  float d;
  float s;
  int8_t qs[kActBlock];
};
static_assert(sizeof(BlockQ8Act) == 40, "BlockQ8Act layout");

// Quantizes x[n] (n a multiple of 32) into n/32 activation blocks.
using QuantizeActFn = void (*)(const float* x, BlockQ8Act* out, int64_t n);
// Dot product of one weight row (n elements, n a multiple of the type's block size: 32, or 256 for
// the K-quants; in the type's block layout)
// with the quantized activation xq[n/32].
using QuantDotFn = float (*)(const void* row, const BlockQ8Act* xq, int64_t n);
// A tile of nr weight rows (row r at rows + r * row_bytes) times nv quantized activation rows
// (activation row v at xq + v * xq_stride), 1 <= nr, nv <= kQuantTileMax, n columns:
//   y[v * ldy + r] = QuantDotFn(row r, activation row v, n), bit for bit, whatever nr and nv.
// So a row's result does not depend on the batch it is computed in nor on how rows are split
// over threads (docs/numerics.md). Each weight block is decoded once per tile.
using QuantTileFn = void (*)(const uint8_t* rows, size_t row_bytes, int nr, const BlockQ8Act* xq, size_t xq_stride,
                             int nv, int64_t n, float* y, size_t ldy);
constexpr int kQuantTileMax = 4;
// Dot product of one float-typed weight row (F32 or F16 bits) with x[n]; any n >= 0.
using FloatDotFn = float (*)(const void* row, const float* x, int64_t n);

struct MatvecKernels {
  Isa isa;
  const char* name;  // "ref", "avx2", "avx512", "avx512vnni"
  QuantizeActFn quantize_act;
  QuantDotFn dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q8_0;
  FloatDotFn dot_f32, dot_f16;
  QuantTileFn tile_q4_0, tile_q4_1, tile_q5_0, tile_q5_1, tile_q8_0;
  QuantDotFn dot_q4_k, dot_q5_k, dot_q6_k;  // n a multiple of 256
  QuantTileFn tile_q4_k, tile_q5_k, tile_q6_k;
  PackedTileFn packed_q4_1, packed_q8_0;  // the packed-layout kernels (matvec_packed.h)
  PackedTileFn packed_q4_k, packed_q6_k;  // the packed K-quant kernels (matvec_packed_kquant.h)
  PackedTileFn packed_q5_0;               // matvec_packed_q5_0.h

  // The integer-dot kernel for `type`, or nullptr when `type` is not an integer-dot type.
  QuantDotFn quant_dot(GgmlType type) const;
  // The tile kernel for `type`, or nullptr when `type` is not an integer-dot type.
  QuantTileFn quant_tile(GgmlType type) const;
  // The packed-layout kernel for `type`, or nullptr when `type` has no packed layout.
  PackedTileFn packed_tile(GgmlType type) const;
  // The float-dot kernel for F32 / F16, or nullptr.
  FloatDotFn float_dot(GgmlType type) const;
};

// Each variant's table. The AVX2 / AVX-512 tables may be fetched on any CPU (tests print them),
// but their functions may only be *called* when best_isa() reaches that level.
const MatvecKernels& matvec_kernels_ref();
const MatvecKernels& matvec_kernels_avx2();
const MatvecKernels& matvec_kernels_avx512();
// The AVX-512 table with the packed kernels on VNNI (vpdpbusd); callable only when
// cpu_has_avx512_vnni(). matvec_kernels_for(Isa::avx512) returns it on such CPUs: VNNI is not an
// ISA tier of its own, its kernels give the same bits as the AVX-512 / AVX2 / ref ones.
const MatvecKernels& matvec_kernels_avx512_vnni();
bool cpu_has_avx512_vnni();
// The table for one ISA level.
const MatvecKernels& matvec_kernels_for(Isa isa);
// The table for active_isa(), chosen once.
const MatvecKernels& active_matvec_kernels();

}  // namespace mpkv

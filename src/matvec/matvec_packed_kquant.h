// The K-quant packed layouts (Q4_K, Q6_K): the x16 row-interleaved groups of matvec_packed.h, with
// one block per 32-column piece of a super-block (piece k of super-block s = activation block 8s + k,
// matvec_kernels.h), the piece's sub-block scales pre-expanded so the microkernel needs no header
// decoding: a piece is laid out and multiplied like a Q4_1 (Q4_K) or Q8_0 (Q6_K) block.
//
// Q4_K x16 piece (kPackedQ4_KBlockBytes = 384 bytes):
//   bytes [64c, 64c + 64), c = 0..3: byte 4r + i = code 4c + i of row r's piece (low nibble) and
//       code 16 + 4c + i (high nibble); codes in [0, 15] (the Q4_1 nibble order, not the GGUF one)
//   bytes [256, 320): the 16 rows' fp32 D = d * sc_k     (exact: an fp16 times a 6-bit integer)
//   bytes [320, 384): the 16 rows' fp32 M = -(dmin * m_k) (exact likewise)
//   so w_j = D * q_j + M, and the pair arithmetic is Q4_1's with D, M for d, m:
//     acc = fma(D_r * dx_b, (float)isum, acc);  acc = fma(M_r, s_b, acc)
//
// Q6_K x16 piece (kPackedQ6_KBlockBytes = 736 bytes):
//   bytes [64c, 64c + 64), c = 0..7: byte 4r + i = code 4c + i of row r's piece, as int8 q - 32
//       in [-32, 31]
//   bytes [512, 544): the 16 rows' fp16 super-block d (the same in the 8 pieces of a super-block)
//   bytes [544, 608): the 16 rows' int8 scale of codes 0-15 (sc_lo), each as two equal int16 in
//       one 32-bit word (the madd / vpdpwssd multiplier of a row's int16 pair sums)
//   bytes [608, 672): the same for codes 16-31 (sc_hi)
//   bytes [672, 736): the 16 rows' int32 K = 128 * (sc_lo * sum_{j<16} c_j + sc_hi * sum_{j>=16} c_j)
//       (a VNNI kernel multiplies (a + 128) x c, unsigned x signed, and subtracts K after the
//       scales; exact, |K| < 2^24)
//   Pair arithmetic: isum = sc_lo * sum_{j<16} c_j a_j + sc_hi * sum_{j>=16} c_j a_j (exact integer,
//     |isum| <= 2 * 128 * 16 * 32 * 127 < 2^24), acc = fma(d_r * dx_b, (float)isum, acc).
//
// Rows past the matrix are zero (D = M = d = 0, codes 0, scales 0). Every tier (the _ref kernels of
// matvec_packed_kquant_ref.cpp, AVX2, AVX-512, AVX-512 VNNI) computes exactly these chains over the
// pieces in order, so they agree bit for bit (docs/numerics.md "Linear layers"). They round
// differently from the GGUF-layout K-quant tile (matvec_tile_kquant_x86.h): a packed matrix and its
// unpacked view differ in the last bits, both within the bound of test_matvec_blocks.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"

namespace mpkv {

struct BlockQ8Act;
struct WeightMatrix;

constexpr size_t kPackedQ4_KBlockBytes = 384, kPackedQ4_KScaleAt = 256, kPackedQ4_KMinAt = 320;
constexpr size_t kPackedQ6_KBlockBytes = 736, kPackedQ6_KScaleAt = 512, kPackedQ6_KSubScaleAt = 544;
constexpr size_t kPackedQ6_KOffsetAt = 672;
constexpr size_t kPackedQ6_KSubScaleBytes = 64;  // one half's (16 rows x 4 bytes) sub-block scales

// Bytes of one packed piece of a K-quant type (Q4_K, Q6_K), 0 for any other type.
size_t packed_kquant_block_bytes(GgmlType type);

// Writes piece b (columns [32b, 32b + 32)) of group g of w (a Q4_K or Q6_K matrix, already checked)
// into out (packed_kquant_block_bytes bytes, zeroed beforehand; rows past the matrix stay zero).
void pack_kquant_block(const WeightMatrix& w, int64_t g, int64_t b, uint8_t* out);

// The scalar reference kernels (PackedTileFn, matvec_packed.h) of the two layouts.
void packed_q4_k_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out);
void packed_q6_k_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out);

}  // namespace mpkv

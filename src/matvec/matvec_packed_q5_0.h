// The packed Q5_0 layout: the x16 row-interleaved groups of matvec_packed.h for Q5_0 (Gemma-3-270M's
// attn_q / attn_k / ffn_gate / ffn_up type), kept as compact as the GGUF blocks (384 bytes per 16
// rows x 32 columns against 352): 5-bit codes as Q4_1's nibbles plus a plane of their 5th bits.
//
// Q5_0 x16 block (kPackedQ5_0BlockBytes = 384 bytes):
//   bytes [64c, 64c + 64), c = 0..3: byte 4r + i = GGUF qs[4c + i] of row r's block: its low nibble
//       holds the low 4 bits of code 4c + i, its high nibble those of code 16 + 4c + i
//   bytes [256, 288): the 16 rows' fp16 d;   bytes [288, 320): the 16 rows' fp16 m = -16 d (exact:
//       packing refuses a d with |16 d| past the fp16 range)
//   bytes [320, 384): byte 4r + i, bit t (0..7) = bit 4 of code 4t + i of row r (GGUF qh bit 4t + i)
// Codes q in [0, 31] (w = d (q - 16)); the pair arithmetic is Q4_1's (matvec_packed.h):
//   isum = sum_j q_j a_j (exact); acc = fma(d_r * dx_b, (float)isum, acc); acc = fma(m_r, s_b, acc).
// Every tier (packed_q5_0_ref, AVX2, AVX-512, AVX-512 VNNI) computes exactly this chain.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mpkv {

struct BlockQ8Act;
struct WeightMatrix;

constexpr size_t kPackedQ5_0BlockBytes = 384, kPackedQ5_0ScaleAt = 256, kPackedQ5_0MinAt = 288,
                 kPackedQ5_0HighBitsAt = 320;

// Writes block b of group g of the Q5_0 matrix w (already checked) into out (kPackedQ5_0BlockBytes,
// zeroed beforehand; rows past the matrix stay zero). Throws Error when a row's d is so large that
// -16 d does not fit fp16 (no real model has one).
void pack_q5_0_block(const WeightMatrix& w, int64_t g, int64_t b, uint8_t* out);

// The scalar reference kernel (PackedTileFn, matvec_packed.h).
void packed_q5_0_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out);

}  // namespace mpkv

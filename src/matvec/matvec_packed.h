// Weights repacked once at load into row-interleaved groups, for the batched integer-dot
// microkernel (one SIMD lane per weight row, docs/numerics.md "Linear layers").
//
// Why: the GGUF layout keeps a row's blocks together, so a kernel working on it reduces each
// (row, token, block) to an fp32 value on its own: per 32 multiply-adds one maddubs + madd + cvt +
// mul + fma + horizontal work. Interleaving rows puts 4 codes of each of 16 rows in one 64-byte
// register (8 rows in each 32-byte half): one broadcast of 4 activation codes and one multiply-add
// (vpdpbusd, or maddubs on AVX2) then advance 16 (8) rows x 4 codes, and the scale work (cvt, mul,
// fma) is shared by the rows of the register. The same layout is read by every tier: AVX-512 VNNI
// takes a group's 16 rows in 512-bit registers, the other tiers its two halves of 8 one after the other.
//
// Q4_1 x16 layout (kPackRows = 16 rows per group; groups of a matrix back to back, rows past the
// matrix's last row are zero blocks whose results are dropped). A group is nb = cols / 32 blocks
// of kPackedQ4_1BlockBytes = 320 bytes; block b of the group:
//   bytes [64c, 64c + 64), c = 0..3 (kPackedChunkBytes each): byte 4r + i = GGUF qs[4c + i] of row
//       r's block b, i.e. its low nibble is code 4c + i and its high nibble code 16 + 4c + i of row r
//   bytes [256, 288): the 16 rows' fp16 d;   bytes [288, 320): the 16 rows' fp16 m
// The arithmetic of one (row r, activation row) pair, fixed for every tier, tile and thread count:
//   acc = 0; for b in block order:
//     isum = sum_{j<32} q_rj * a_j                         (exact integer)
//     acc  = fma(d_r * dx_b, (float)isum, acc)             (fp32; d_r * dx_b one fp32 product)
//     acc  = fma(m_r, s_b, acc)
//   y = acc
// (BlockQ8Act: dx_b = d, s_b = s.) Every tier computes exactly this, so every tier gives the same bits.
//
// Q8_0 x16 layout: blocks of kPackedQ8_0BlockBytes = 576 bytes:
//   bytes [64c, 64c + 64), c = 0..7: byte 4r + i = GGUF qs[4c + i] (int8) of row r's block b
//   bytes [512, 544): the 16 rows' fp16 d
//   bytes [544, 576): the 16 rows' int16 sum of their 32 codes (a VNNI kernel multiplies
//       (a + 128) x w, unsigned x signed, and subtracts 128 * this sum; exact)
// Pair arithmetic: as Q4_1 without the min term: acc = fma(d_r * dx_b, (float)isum, acc).
//
// The K-quant layouts (Q4_K, Q6_K: a block per 32-column piece of a super-block) are in
// matvec_packed_kquant.h, the Q5_0 layout in matvec_packed_q5_0.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "gguf/ggml_types.h"

namespace mpkv {

struct BlockQ8Act;
struct WeightMatrix;

constexpr int kPackRows = 16;
constexpr size_t kPackedChunkBytes = 4 * kPackRows;  // 4 codes of each row of a group
constexpr size_t kPackedQ4_1BlockBytes = 320, kPackedQ4_1ScaleAt = 256, kPackedQ4_1MinAt = 288;
constexpr size_t kPackedQ8_0BlockBytes = 576, kPackedQ8_0ScaleAt = 512, kPackedQ8_0SumAt = 544;

// A matrix in a packed layout: `groups` groups of kPackRows rows, group g at data() + g * group_bytes.
class PackedMatrix {
 public:
  PackedMatrix(GgmlType type, int64_t rows, int64_t cols);
  GgmlType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t groups() const { return (rows_ + kPackRows - 1) / kPackRows; }
  size_t group_bytes() const { return group_bytes_; }
  const uint8_t* group(int64_t g) const { return bytes_.get() + (size_t)g * group_bytes_; }
  uint8_t* mutable_group(int64_t g) { return bytes_.get() + (size_t)g * group_bytes_; }
  size_t size_bytes() const { return (size_t)groups() * group_bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  GgmlType type_;
  int64_t rows_, cols_;
  size_t group_bytes_;
  std::unique_ptr<uint8_t[], Free> bytes_;  // 64-byte aligned
};

// True when `type` has a packed layout and kernel (Q4_1, Q8_0; Q4_K, Q6_K: matvec_packed_kquant.h;
// Q5_0: matvec_packed_q5_0.h).
bool has_packed_layout(GgmlType type);

// True when the packed kernels of `type` prefetch the next group themselves, block by block
// (Q4_1, Q8_0 and Q4_K, whose kernels are Q4_1's templates: matvec_packed_x86.h); the driver
// prefetches ahead of the others' calls (Q6_K, Q5_0).
inline bool packed_kernel_prefetches(GgmlType type) {
  return type == GgmlType::Q4_1 || type == GgmlType::Q8_0 || type == GgmlType::Q4_K;
}

// The packed copy of w (checked as check_weight_matrix does), or nullptr when w's type has no
// packed layout. The copy does not refer to w's data.
std::unique_ptr<PackedMatrix> pack_weight_matrix(const WeightMatrix& w);

// One group of kPackRows packed rows times nv activation rows (activation row v at xq + v * xq_stride,
// nb = cols / 32 blocks each; nv >= 1): out[v * kPackRows + r] = the pair's result defined above.
using PackedTileFn = void (*)(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv,
                              float* out);

}  // namespace mpkv

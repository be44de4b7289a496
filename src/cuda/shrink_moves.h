// In-place shrink of a whole page by the equivalent right shift (docs/cuda.md, "Shrink").
// A page whose blocks each halve (or keep) their bits becomes the same page at the new bits in
// the same memory: block by block, the codes shrink to half their bytes (shrink_code_byte: each
// destination byte from two source bytes), the fp16 scales and zeros are copied unchanged (the
// new layout's scale_mult carries the factor) and blocks that keep their bits move down.
//
// Why in place is safe: in the move list below every destination byte sits at or before the
// source bytes it is computed from, and moves are in increasing order. The kernel runs a move in
// chunks of destination bytes; each chunk reads all its sources, synchronises, then writes. A
// chunk writes only below the end of the sources it read, so it never overwrites a source that
// a later chunk still has to read; reading before writing covers the overlap inside a chunk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/kv_math_hd.h"

namespace mpkv::cuda {
struct PageFormat;
}

namespace mpkv::cuda {

struct ShrinkMove {
  uint32_t src = 0, dst = 0;  // byte offsets in the page
  uint32_t src_bytes = 0;
  int32_t to_bits = 0;        // 0: copy src_bytes; 1/2/4/8: halve codes (dst gets src_bytes / 2)
};

MPKV_HD uint32_t move_dst_bytes(const ShrinkMove& m) { return m.to_bits == 0 ? m.src_bytes : m.src_bytes / 2; }

// Destination byte k of the move, from the page's current (not yet overwritten) source bytes.
MPKV_HD uint8_t move_byte(const ShrinkMove& m, const uint8_t* page, uint32_t k) {
  if (m.to_bits == 0) return page[m.src + k];
  return shrink_code_byte(page[m.src + 2 * k], page[m.src + 2 * k + 1], m.to_bits);
}


// The moves that turn a page at bits `from` into the same page at `to` (each to[b] == from[b] or
// from[b] / 2 on a quantized block's ladder; Error otherwise). Moves that would not move anything
// are left out.
std::vector<ShrinkMove> page_shrink_moves(const PageFormat& f, const uint8_t* from, const uint8_t* to);

// Runs the moves on a host page exactly as the device kernel orders them (chunks of `chunk`
// destination bytes, each read whole before it is written); the reference the kernel is tested against.
void run_shrink_moves(const std::vector<ShrinkMove>& moves, uint8_t* page, uint32_t chunk);

}  // namespace mpkv::cuda

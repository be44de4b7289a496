// The integer-dot tile kernel shared by matvec_avx2.cpp and matvec_avx512.cpp (include ONLY from
// those files; internal linkage for the reason given in matvec_x86_helpers.h).
//
// A tile is nr weight rows x nv activation rows (1 <= nr, nv <= kQuantTileMax). Each weight block is
// expanded to 32 code bytes per activation block once and meets the nv activation blocks; each
// activation block is loaded once for the nr rows. The arithmetic of one (weight row, activation
// row) pair is fixed, whatever the tile shape, so a row's result does not depend on how many rows
// share the call:
//   acc  (8 fp32 lanes) = fma(set1(dw_b * dx_b), isum8_b, acc)   for b = 0, 1, ... in order
//   offs (1 fp32 lane)  = fma(c_b, s_b, offs)                    in the same order
//   y = hsum(acc) + kOffsetFactor * offs
// isum8_b: the 8 groups-of-4 integer sums of activation block b (maddubs + madd, exact; K-quant
// sub-block scales folded in by the madd); dw_b the weight scale (d of the K-quant super-block);
// c_b the offset coefficient (m for Q4_1 / Q5_1, dw for Q4_0 / Q5_0 with factor -8 / -16,
// none for Q8_0 / Q6_K); s_b = dx_b * sum(activation codes). Q4_K / Q5_K put their offsets
// -dmin * m_k * s_k into lane k of acc instead, once per super-block after its 8 pieces
// (kLaneOffset). The offsets of one weight row for the nv activation rows sit in the lanes of one
// __m128 (lane v = activation row v); lanes are independent, so the lane an activation row lands
// in does not change its value.
#pragma once
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_x86_helpers.h"

namespace mpkv {
namespace {

inline __m256i tile_load_act(const BlockQ8Act& a) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
}

// A weight type for the tile kernel (the K-quant ones are in matvec_tile_kquant_x86.h):
//   Block          the GGUF block; it covers kPieces activation blocks of 32 (1, or 8 for K-quants)
//   Prep prep(w)   what the block's header decodes to, once per (weight row, block): p.d is the
//                  fp32 scale that multiplies dx, the rest is the type's own
//   codes(w, k)    the 32 codes of piece k as bytes (unsigned, or signed for dot's sign trick)
//   dot(c, a, p, k) the 8 exact integer sums over groups of 4 bytes (sub-block scales folded in), as fp32
//   offset(p, k)   the offset coefficient c of piece k (with kOffset; times kOffsetFactor at the end)
//   kLaneOffset    (K-quants with mins) instead of kOffset: p.mins holds piece k's coefficient in
//                  lane k, and acc = fnmadd(p.mins, (s of pieces 0..7 in lanes 0..7), acc) once per
//                  weight block, after its pieces

// The types with one activation block per weight block: Prep is the block's scale and offset coefficient.
struct TilePerBlock {
  struct Prep {
    float d, off;
  };
  static constexpr int kPieces = 1;
  static constexpr bool kLaneOffset = false;
  static float offset(const Prep& p, int) { return p.off; }
};

struct TileQ4_0 : TilePerBlock {
  using Block = BlockQ4_0;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = -8.0f;
  static Prep prep(const Block& w) { return {x86_fp16(w.d), x86_fp16(w.d)}; }
  static __m256i codes(const Block& w, int) { return x86_bytes_from_nibbles_32(w.qs); }
  static __m256 dot(__m256i c, __m256i a, const Prep&, int) { return x86_dot_us8_groups(c, a); }
};
struct TileQ4_1 : TilePerBlock {
  using Block = BlockQ4_1;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = 1.0f;
  static Prep prep(const Block& w) { return {x86_fp16(w.d), x86_fp16(w.m)}; }
  static __m256i codes(const Block& w, int) { return x86_bytes_from_nibbles_32(w.qs); }
  static __m256 dot(__m256i c, __m256i a, const Prep&, int) { return x86_dot_us8_groups(c, a); }
};
struct TileQ5_0 : TilePerBlock {
  using Block = BlockQ5_0;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = -16.0f;
  static Prep prep(const Block& w) { return {x86_fp16(w.d), x86_fp16(w.d)}; }
  static __m256i codes(const Block& w, int) { return x86_q5_codes_32(w.qs, w.qh); }
  static __m256 dot(__m256i c, __m256i a, const Prep&, int) { return x86_dot_us8_groups(c, a); }
};
struct TileQ5_1 : TilePerBlock {
  using Block = BlockQ5_1;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = 1.0f;
  static Prep prep(const Block& w) { return {x86_fp16(w.d), x86_fp16(w.m)}; }
  static __m256i codes(const Block& w, int) { return x86_q5_codes_32(w.qs, w.qh); }
  static __m256 dot(__m256i c, __m256i a, const Prep&, int) { return x86_dot_us8_groups(c, a); }
};
struct TileQ8_0 : TilePerBlock {
  using Block = BlockQ8_0;
  static constexpr bool kOffset = false;
  static constexpr float kOffsetFactor = 0.0f;
  static Prep prep(const Block& w) { return {x86_fp16(w.d), 0.0f}; }
  static __m256i codes(const Block& w, int) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)); }
  static __m256 dot(__m256i c, __m256i a, const Prep&, int) { return x86_dot_ss8_groups(c, a); }
};

// Activation sums of block b for the V activation rows, lane v (unused lanes 0).
template <int V>
inline __m128 tile_act_sums(const BlockQ8Act* xq, size_t xq_stride, int64_t b) {
  return _mm_setr_ps(xq[b].s, V > 1 ? xq[xq_stride + b].s : 0.0f, V > 2 ? xq[2 * xq_stride + b].s : 0.0f,
                     V > 3 ? xq[3 * xq_stride + b].s : 0.0f);
}

// The activation sums s of 8 consecutive activation blocks, block k in lane k (BlockQ8Act is 10 floats).
inline __m256 tile_act_sums_8(const BlockQ8Act* blocks) {
  static_assert(sizeof(BlockQ8Act) == 10 * sizeof(float), "BlockQ8Act stride in floats");
  return _mm256_i32gather_ps(&blocks->s, _mm256_setr_epi32(0, 10, 20, 30, 40, 50, 60, 70), 4);
}

template <class T, int R, int V>
void quant_tile_rv(const uint8_t* rows, size_t row_bytes, const BlockQ8Act* xq, size_t xq_stride, int64_t nb,
                   float* y, size_t ldy) {
  using Block = typename T::Block;
  constexpr int P = T::kPieces;
  __m256 acc[R][V];
  __m128 offs[R];
  for (int r = 0; r < R; ++r) {
    offs[r] = _mm_setzero_ps();
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t wb = 0; wb < nb / P; ++wb) {  // weight blocks; activation blocks wb*P .. wb*P + P-1
    static_assert(P == 1 || !T::kOffset, "per-piece offsets only for one piece per block");
    const __m128 sums = T::kOffset ? tile_act_sums<V>(xq, xq_stride, wb) : _mm_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const Block& w = reinterpret_cast<const Block*>(rows + (size_t)r * row_bytes)[wb];
      const typename T::Prep p = T::prep(w);
      const __m256 dw = _mm256_set1_ps(p.d);
      for (int k = 0; k < P; ++k) {
        const __m256i codes = T::codes(w, k);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          const BlockQ8Act& a = xq[(size_t)v * xq_stride + wb * P + k];
          // dw * dx as one vector multiply of a broadcast load (the same IEEE product as a scalar one).
          const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d));
          acc[r][v] = _mm256_fmadd_ps(scale, T::dot(codes, tile_load_act(a), p, k), acc[r][v]);
        }
        if (T::kOffset) offs[r] = _mm_fmadd_ps(_mm_set1_ps(T::offset(p, k)), sums, offs[r]);
      }
      if constexpr (T::kLaneOffset) {
        static_assert(P == 8, "one lane per piece");
        for (int v = 0; v < V; ++v) {
          acc[r][v] = _mm256_fnmadd_ps(p.mins, tile_act_sums_8(xq + (size_t)v * xq_stride + wb * P), acc[r][v]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(16) float o[4];
    _mm_store_ps(o, offs[r]);
    for (int v = 0; v < V; ++v) y[(size_t)v * ldy + r] = x86_hsum_ps(acc[r][v]) + T::kOffsetFactor * o[v];
  }
}

// Dispatch to the <R, V> instance (nr, nv in [1, 4]).
template <class T>
void quant_tile(const uint8_t* rows, size_t row_bytes, int nr, const BlockQ8Act* xq, size_t xq_stride, int nv,
                int64_t n, float* y, size_t ldy) {
  using Fn = void (*)(const uint8_t*, size_t, const BlockQ8Act*, size_t, int64_t, float*, size_t);
  static constexpr Fn kTable[4][4] = {
      {quant_tile_rv<T, 1, 1>, quant_tile_rv<T, 1, 2>, quant_tile_rv<T, 1, 3>, quant_tile_rv<T, 1, 4>},
      {quant_tile_rv<T, 2, 1>, quant_tile_rv<T, 2, 2>, quant_tile_rv<T, 2, 3>, quant_tile_rv<T, 2, 4>},
      {quant_tile_rv<T, 3, 1>, quant_tile_rv<T, 3, 2>, quant_tile_rv<T, 3, 3>, quant_tile_rv<T, 3, 4>},
      {quant_tile_rv<T, 4, 1>, quant_tile_rv<T, 4, 2>, quant_tile_rv<T, 4, 3>, quant_tile_rv<T, 4, 4>}};
  static_assert(kQuantTileMax == 4, "table size");
  kTable[nr - 1][nv - 1](rows, row_bytes, xq, xq_stride, n / kActBlock, y, ldy);
}

// The single-row dot product is the 1 x 1 tile: same arithmetic as every other tile shape.
template <class T>
float quant_dot_as_tile(const void* row, const BlockQ8Act* xq, int64_t n) {
  float y;
  quant_tile_rv<T, 1, 1>(static_cast<const uint8_t*>(row), 0, xq, 0, n / kActBlock, &y, 1);
  return y;
}

}  // namespace
}  // namespace mpkv

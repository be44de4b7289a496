// The integer-dot tile kernel shared by matvec_avx2.cpp and matvec_avx512.cpp (include ONLY from
// those files; internal linkage for the reason given in matvec_x86_helpers.h).
//
// A tile is nr weight rows x nv activation rows (1 <= nr, nv <= kQuantTileMax). Each weight block is
// expanded to 32 code bytes once and meets the nv activation blocks; each activation block is loaded
// once for the nr rows. The arithmetic of one (weight row, activation row) pair is fixed, whatever the
// tile shape, so a row's result does not depend on how many rows share the call:
//   acc  (8 fp32 lanes) = fma(set1(dw_b * dx_b), isum8_b, acc)   for b = 0, 1, ... in order
//   offs (1 fp32 lane)  = fma(c_b, s_b, offs)                    in the same order
//   y = hsum(acc) + kOffsetFactor * offs
// isum8_b: the 8 groups-of-4 integer sums of the block (maddubs + madd, exact); c_b is the weight
// block's offset coefficient (m for Q4_1 / Q5_1, dw for Q4_0 / Q5_0 with factor -8 / -16, none for
// Q8_0); s_b = dx_b * sum(activation codes). The offsets of one weight row for the nv activation
// rows sit in the lanes of one __m128 (lane v = activation row v); lanes are independent, so the
// lane an activation row lands in does not change its value.
#pragma once
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_x86_helpers.h"

namespace mpkv {
namespace {

inline __m256i tile_load_act(const BlockQ8Act& a) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
}

struct TileQ4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = -8.0f;
  static __m256i codes(const Block& w) { return x86_bytes_from_nibbles_32(w.qs); }
  static float scale(const Block& w) { return x86_fp16(w.d); }
  static float offset(const Block& w) { return x86_fp16(w.d); }
  static __m256 dot(__m256i c, __m256i a) { return x86_dot_us8_groups(c, a); }
};
struct TileQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = 1.0f;
  static __m256i codes(const Block& w) { return x86_bytes_from_nibbles_32(w.qs); }
  static float scale(const Block& w) { return x86_fp16(w.d); }
  static float offset(const Block& w) { return x86_fp16(w.m); }
  static __m256 dot(__m256i c, __m256i a) { return x86_dot_us8_groups(c, a); }
};
struct TileQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = -16.0f;
  static __m256i codes(const Block& w) { return x86_q5_codes_32(w.qs, w.qh); }
  static float scale(const Block& w) { return x86_fp16(w.d); }
  static float offset(const Block& w) { return x86_fp16(w.d); }
  static __m256 dot(__m256i c, __m256i a) { return x86_dot_us8_groups(c, a); }
};
struct TileQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kOffset = true;
  static constexpr float kOffsetFactor = 1.0f;
  static __m256i codes(const Block& w) { return x86_q5_codes_32(w.qs, w.qh); }
  static float scale(const Block& w) { return x86_fp16(w.d); }
  static float offset(const Block& w) { return x86_fp16(w.m); }
  static __m256 dot(__m256i c, __m256i a) { return x86_dot_us8_groups(c, a); }
};
struct TileQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kOffset = false;
  static constexpr float kOffsetFactor = 0.0f;
  static __m256i codes(const Block& w) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)); }
  static float scale(const Block& w) { return x86_fp16(w.d); }
  static float offset(const Block&) { return 0.0f; }
  static __m256 dot(__m256i c, __m256i a) { return x86_dot_ss8_groups(c, a); }
};

// Activation sums of block b for the V activation rows, lane v (unused lanes 0).
template <int V>
inline __m128 tile_act_sums(const BlockQ8Act* xq, size_t xq_stride, int64_t b) {
  return _mm_setr_ps(xq[b].s, V > 1 ? xq[xq_stride + b].s : 0.0f, V > 2 ? xq[2 * xq_stride + b].s : 0.0f,
                     V > 3 ? xq[3 * xq_stride + b].s : 0.0f);
}

template <class T, int R, int V>
void quant_tile_rv(const uint8_t* rows, size_t row_bytes, const BlockQ8Act* xq, size_t xq_stride, int64_t nb,
                   float* y, size_t ldy) {
  using Block = typename T::Block;
  __m256 acc[R][V];
  __m128 offs[R];
  for (int r = 0; r < R; ++r) {
    offs[r] = _mm_setzero_ps();
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const __m128 sums = T::kOffset ? tile_act_sums<V>(xq, xq_stride, b) : _mm_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const Block& w = reinterpret_cast<const Block*>(rows + (size_t)r * row_bytes)[b];
      const __m256i codes = T::codes(w);
      const float dw = T::scale(w);
      for (int v = 0; v < V; ++v) {
        const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
        acc[r][v] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), T::dot(codes, tile_load_act(a)), acc[r][v]);
      }
      if (T::kOffset) offs[r] = _mm_fmadd_ps(_mm_set1_ps(T::offset(w)), sums, offs[r]);
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

// The packed-weight microkernel (matvec_packed.h) for x86, shared by matvec_avx2.cpp,
// matvec_avx512.cpp and matvec_avx512vnni.cpp (include ONLY from those; internal linkage for the
// reason given in matvec_x86_helpers.h).
//
// 256-bit kernels: a group of 16 interleaved rows is taken as two halves of 8 rows (lanes), each
// against nv activation rows in tiles of V. Per block b and tile: each code register of the half
// (8 rows x 4 bytes) is loaded once; per activation row, 8 broadcasts of 4 activation codes meet
// them in an integer multiply-add (lane r accumulates row r's integer sum, exactly), then one cvt,
// one mul (d_r * dx) and one fma (two with a min term) finish the block for the 8 rows
// (matvec_packed.h gives the per-lane arithmetic, the same as the _ref kernels'). The AVX-512 VNNI
// kernels (matvec_avx512vnni.cpp) take the whole group in 512-bit registers.
#pragma once
#include <cstring>

#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed.h"
#include "matvec/matvec_x86_helpers.h"

namespace mpkv {
namespace {

// The 4 activation codes [4k, 4k + 4) of `a` as one 32-bit word (to broadcast to every lane).
inline int32_t packed_act_word(const BlockQ8Act& a, int k) {
  int32_t v;
  std::memcpy(&v, a.qs + 4 * k, 4);
  return v;
}
inline __m256i packed_act4(const BlockQ8Act& a, int k) { return _mm256_set1_epi32(packed_act_word(a, k)); }

// Block sums of a packed type on one half of a group: sums<V>(blk, a, stride, isum) sets isum[v]
// (8 int32 lanes, lane r = row r of the half) to the exact integer sum of the row's codes of this
// block times activation row v's codes (a[v * stride] is activation row v's block). `blk` points
// at the block plus the half's offset in each chunk (0 or 32 bytes); kScaleAt / kMinAt: offsets of
// the fp16 scales d / mins m in the block (kMinAt 0: no min term).

// Q4_1 on a u8 x s8 multiply-add Dot: Dot::Sum accumulates 4-byte groups, Dot::lanes gives int32.
template <class Dot>
struct SumsQ4_1 {
  static constexpr size_t kBlockBytes = kPackedQ4_1BlockBytes, kScaleAt = kPackedQ4_1ScaleAt, kMinAt = kPackedQ4_1MinAt;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m256i* isum) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    typename Dot::Sum sum[V];
    for (int v = 0; v < V; ++v) sum[v] = Dot::zero();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedChunkBytes * c));
      const __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        sum[v] = Dot::add(sum[v], lo, packed_act4(a[(size_t)v * stride], c));
        sum[v] = Dot::add(sum[v], hi, packed_act4(a[(size_t)v * stride], c + 4));
      }
    }
    for (int v = 0; v < V; ++v) isum[v] = Dot::lanes(sum[v]);
  }
};

// AVX2 Dot for codes <= 15: maddubs into int16 lanes, which hold a whole Q4_1 block without
// overflow (a lane adds 8 pairs of products of codes <= 15 and |a| <= 127: 8 * 2 * 15 * 127 =
// 30480 < 32767), one madd at the end.
struct DotMaddubs {
  using Sum = __m256i;  // 16 int16 lanes: row r in lanes 2r, 2r+1
  static Sum zero() { return _mm256_setzero_si256(); }
  static Sum add(Sum s, __m256i codes, __m256i act) { return _mm256_add_epi16(s, _mm256_maddubs_epi16(codes, act)); }
  static __m256i lanes(Sum s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
};

// Q8_0 on AVX2: signed codes, so maddubs(|w|, sign(a, w)) (a pair <= 2 * 128 * 127 = 32512 fits
// int16) and madd into int32 per 4-byte group.
struct SumsQ8_0Maddubs {
  static constexpr size_t kBlockBytes = kPackedQ8_0BlockBytes, kScaleAt = kPackedQ8_0ScaleAt, kMinAt = 0;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m256i* isum) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int v = 0; v < V; ++v) isum[v] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedChunkBytes * c));
      const __m256i wabs = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        const __m256i act = _mm256_sign_epi8(packed_act4(a[(size_t)v * stride], c), w);
        isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, act), ones));
      }
    }
  }
};

// The 8 per-row scales (or mins) of half h at `at`: fp16, or fp32 where S::kScalesF32 (the packed
// K-quants' pre-expanded d * sc, matvec_packed_kquant.h).
template <class S>
inline __m256 packed_scales8(const uint8_t* at, int h) {
  if constexpr (requires { S::kScalesF32; }) return _mm256_loadu_ps(reinterpret_cast<const float*>(at) + 8 * h);
  else return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 16 * h)));
}

// Prefetches block `blk`'s counterpart in the next group (groups lie back to back, matvec_packed.h),
// a block at a time, so the next group's lines stream in while this one computes: a burst of a
// whole group's prefetches before the kernel call stalls the core once the line-fill buffers are
// full (13% of a batch-16 decode's CPU time sat on it, docs/results/speed.md). Past the last group
// the addresses are not the matrix's; a prefetch never faults. Speed only: no result depends on it.
template <class S>
inline void packed_prefetch_next_group(const uint8_t* blk, int64_t nb) {
  const uint8_t* next = blk + (size_t)nb * S::kBlockBytes;
  for (size_t o = 0; o < S::kBlockBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
}

// Half h (rows 8h .. 8h + 7) of a group x V activation rows (row v at xq + v * xq_stride):
// out[v * kPackRows + 8h + r].
template <class S, int V>
void packed_half_rows(const uint8_t* group, int h, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, float* out) {
  __m256 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + (size_t)b * S::kBlockBytes;
    if (h == 0) packed_prefetch_next_group<S>(blk, nb);
    __m256i isum[V];
    S::template sums<V>(blk + 32 * h, xq + b, xq_stride, isum);
    const __m256 d = packed_scales8<S>(blk + S::kScaleAt, h);
    __m256 m = _mm256_setzero_ps();
    if constexpr (S::kMinAt > 0) m = packed_scales8<S>(blk + S::kMinAt, h);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
      const __m256 scale = _mm256_mul_ps(d, _mm256_broadcast_ss(&a.d));
      acc[v] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum[v]), acc[v]);
      if constexpr (S::kMinAt > 0) acc[v] = _mm256_fmadd_ps(m, _mm256_broadcast_ss(&a.s), acc[v]);
    }
  }
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + (size_t)v * kPackRows + 8 * h, acc[v]);
}

// Both halves of a group x V activation rows.
template <class S, int V>
void packed_rows(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, float* out) {
  packed_half_rows<S, V>(group, 0, nb, xq, xq_stride, out);
  packed_half_rows<S, V>(group, 1, nb, xq, xq_stride, out);
}

// The tiling of nv activation rows shared by the 256- and 512-bit kernels: tiles of W rows through
// Rows<W>::run, then the last nv % W rows through Rows<nv % W>::run. A pair's lane arithmetic
// does not depend on the tile it is in, so neither W nor nv changes any result.
template <template <int> class Rows, int V>
void packed_tail(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  if constexpr (V > 0) {
    if (nv == V) return Rows<V>::run(group, nb, xq, xq_stride, out);
    packed_tail<Rows, V - 1>(group, nb, xq, xq_stride, nv, out);
  }
}

template <template <int> class Rows, int W>
void packed_tiles(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  int v = 0;
  for (; v + W <= nv; v += W) Rows<W>::run(group, nb, xq + (size_t)v * xq_stride, xq_stride, out + (size_t)v * kPackRows);
  packed_tail<Rows, W - 1>(group, nb, xq + (size_t)v * xq_stride, xq_stride, nv - v, out + (size_t)v * kPackRows);
}

// A PackedTileFn of the 256-bit kernels.
template <class S>
struct PackedRows256 {
  template <int V>
  struct Rows {
    static void run(const uint8_t* g, int64_t nb, const BlockQ8Act* xq, size_t st, float* out) {
      packed_rows<S, V>(g, nb, xq, st, out);
    }
  };
};
template <class S, int W>
void packed_tile(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  packed_tiles<PackedRows256<S>::template Rows, W>(group, nb, xq, xq_stride, nv, out);
}

}  // namespace
}  // namespace mpkv

// The int8 paged-attention kernels (paged_attention_kernels.h: packed_scores_q8, packed_accumulate_q8)
// and the small SIMD helpers they share with the float kernels, written with 256-bit AVX2 intrinsics.
// Included ONLY by the ISA-flagged translation units (paged_attention_kernels_avx2.cpp and _avx512.cpp):
// everything here has internal linkage, so each includes its own copy compiled with its own flags,
// and the AVX-512 one may use the 32 vector registers EVEX encoding gives 256-bit code (the value
// kernel then keeps all its accumulators in registers: accumulate_q8 below).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "attention/paged_attention_kernels.h"
#include "quant/bits_dispatch.h"

namespace mpkv {
namespace {  // internal linkage: never merged across ISA-flagged files

constexpr int kTile = 4;

inline __m256 load_h8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load_h8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline float hsum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

inline float half_at(const uint8_t* block, size_t offset, size_t i) {
  uint16_t h;
  std::memcpy(&h, block + offset + 2 * i, 2);
  return _cvtsh_ss(h);
}

// True scales of a uniform block: the stored fp16 scale(s) at parameter index i times scale_mult.
inline float scale_at(const KvBlockLayout& L, const uint8_t* blk, size_t i) { return half_at(blk, L.scales_offset, i) * L.scale_mult; }
inline __m256 scales8_at(const KvBlockLayout& L, const uint8_t* blk, size_t i) {
  return _mm256_mul_ps(load_h8(blk + L.scales_offset + 2 * i), _mm256_set1_ps(L.scale_mult));
}

template <class F>
void with_tile(int nj, F&& f) {
  switch (nj) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}


// maddubs(u8, *s8) and acc + maddubs(u8, *s8), s8 read as a memory operand; acc +
// maddubs(u8, broadcast of the 32-bit word *w), the word broadcast from memory (a load, no shuffle).
// In asm because in loops with more live vectors than registers GCC hoists such loads into
// registers and computes every product of a row (pair) before adding them, then spills the
// accumulators (x86 GCC does not schedule for register pressure); volatile keeps the source order,
// so the loops' registers stay accumulators and the current code vector.
inline __m256i maddubs_mem(__m256i u8, const __m256i* s8) {
  __m256i r;
  asm volatile("vpmaddubsw %1, %2, %0" : "=x"(r) : "m"(*s8), "x"(u8));
  return r;
}
inline __m256i add_maddubs_mem(__m256i acc, __m256i u8, const __m256i* s8) {
  __m256i r, t;
  asm volatile("vpmaddubsw %3, %4, %1\n\tvpaddw %1, %2, %0" : "=x"(r), "=&x"(t) : "x"(acc), "m"(*s8), "x"(u8));
  return r;
}
inline __m256i add_maddubs_bcast(__m256i acc, __m256i u8, const int32_t* w) {
  __m256i r, t;
  asm volatile("vpbroadcastd %3, %1\n\tvpmaddubsw %1, %4, %1\n\tvpaddw %1, %2, %0"
               : "=x"(r), "=&x"(t)
               : "x"(acc), "m"(*w), "x"(u8));
  return r;
}

// ---- int8 queries (q8_scores_apply layouts) ----------------------------------------------------
//
// A row's codes, per 64 channels, become V integer vectors, and a query's int8 values the V
// matching vectors; their dot is an s32 vector whose lanes sum to q8 . code:
//   2, 4 bits  V = 2 byte planes (u8 codes 0..15), maddubs against int8 query bytes reordered to
//              the planes (at most 2 x 15 x 127 per s16 lane, no saturation), widened by madd
//   8 bits     V = 4 vectors of 16 u16 codes (zero-extended), madd against int16 query values
//   16 bits    V = 4 vectors of 16 codes read as code - 32768 (xor 0x8000), madd against int16
//              query values; bias = 32768 sum(q8) restores q8 . code. In int32 wrap-around the sum
//              is exact whenever the result fits, which head_dim <= kMaxQ8Dim guarantees.

template <int BITS>
constexpr int kQ8Vecs = BITS <= 4 ? 2 : 4;

// The V code vectors of channels [64c, 64c + 64) of one row.
template <int BITS>
inline void load_code_vecs(const uint8_t* row, int c, __m256i* v) {
  if constexpr (BITS == 4) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * c));
    v[0] = _mm256_and_si256(x, _mm256_set1_epi8(0x0F));                      // channels 2i
    v[1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), _mm256_set1_epi8(0x0F));  // channels 2i + 1
  } else if constexpr (BITS == 2) {
    const __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c)));
    // 64-bit lanes shifted by 0 / 2 (v0: fields 0 and 1) and 4 / 6 (v1: fields 2 and 3); the bits
    // shifted in from the next byte are masked off.
    v[0] = _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_set_epi64x(2, 2, 0, 0)), _mm256_set1_epi8(0x03));
    v[1] = _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_set_epi64x(6, 6, 4, 4)), _mm256_set1_epi8(0x03));
  } else if constexpr (BITS == 8) {
    for (int k = 0; k < 4; ++k)
      v[k] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 64 * c + 16 * k)));
  } else {
    for (int k = 0; k < 4; ++k)
      v[k] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 128 * c + 32 * k)),
                              _mm256_set1_epi16(-32768));
  }
}

// The V query vectors of channels [64c, 64c + 64) from int8 values in channel order, reordered
// for the byte planes of 2- and 4-bit codes:
//   4 bits  v0 = channels 2i, v1 = channels 2i + 1 (i < 32)
//   2 bits  v0 = channels 4i then 4i + 1, v1 = 4i + 2 then 4i + 3 (i < 16)
template <int BITS>
inline void load_query_vecs(const int8_t* q8, int c, __m256i* v) {
  const int8_t* p = q8 + 64 * c;
  if constexpr (BITS >= 8) {
    for (int k = 0; k < 4; ++k) v[k] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k)));
    return;
  }
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  if constexpr (BITS == 4) {
    // Per 16-byte lane: even bytes to the low 8, odd to the high 8; then qwords to [E E O O].
    const __m256i sh = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14,
                                        1, 3, 5, 7, 9, 11, 13, 15);
    const __m256i y0 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(x0, sh), 0xD8);
    const __m256i y1 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(x1, sh), 0xD8);
    v[0] = _mm256_permute2x128_si256(y0, y1, 0x20);
    v[1] = _mm256_permute2x128_si256(y0, y1, 0x31);
  } else {
    // Per 16-byte lane a 4x4 byte transpose (dword k = field k), then dwords to [A A B B | C C D D]
    // and qwords gathered so v0 = [fields 0 | fields 1], v1 = [fields 2 | fields 3].
    const __m256i sh = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2,
                                        6, 10, 14, 3, 7, 11, 15);
    const __m256i idx = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i y0 = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(x0, sh), idx);
    const __m256i y1 = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(x1, sh), idx);
    const __m256i lo = _mm256_unpacklo_epi64(y0, y1), hi = _mm256_unpackhi_epi64(y0, y1);
    v[0] = _mm256_permute2x128_si256(lo, hi, 0x20);
    v[1] = _mm256_permute2x128_si256(lo, hi, 0x31);
  }
}

template <int BITS>
inline __m256i dot_vecs(const __m256i* code, const __m256i* q) {
  if constexpr (BITS <= 4) {
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(code[0], q[0]), _mm256_maddubs_epi16(code[1], q[1]));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  } else {
    return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(code[0], q[0]), _mm256_madd_epi16(code[1], q[1])),
                            _mm256_add_epi32(_mm256_madd_epi16(code[2], q[2]), _mm256_madd_epi16(code[3], q[3])));
  }
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4E));
  a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xB1));
  return _mm_cvtsi128_si32(a);
}

// NJ int8 queries prepared for one code width: dots(row) gives each query's s32 dot vector.
// CH: 64-channel chunks per row when known at compile time (1: head_dim 64, SmolLM2's), else 0 and
// the count is taken from set_query's d.
template <int BITS, int NJ, int CH>
struct Q8Tile {
  static constexpr int V = kQ8Vecs<BITS>;
  int chunks = CH;
  __m256i qv[NJ][kMaxQ8Dim / 64][V];
  int32_t bias[NJ] = {};  // 16 bits: 32768 sum(q8), added to every dot

  void set_query(int j, const int8_t* q8, int d) {
    if constexpr (CH == 0) chunks = d / 64;
    for (int c = 0; c < chunks; ++c) load_query_vecs<BITS>(q8, c, qv[j][c]);
    if constexpr (BITS == 16) {
      int32_t sum = 0;
      for (int c = 0; c < d; ++c) sum += q8[c];
      bias[j] = 32768 * sum;
    }
    if constexpr (BITS == 2) {
      for (int c = 0; c < chunks; ++c) {
        for (int f = 0; f < 2; ++f) {
          q2[j][c][2 * f] = _mm256_permute2x128_si256(qv[j][c][f], qv[j][c][f], 0x00);
          q2[j][c][2 * f + 1] = _mm256_permute2x128_si256(qv[j][c][f], qv[j][c][f], 0x11);
        }
      }
    }
  }
  // 2 bits, two rows per vector: a 64-channel chunk of a row is 16 bytes, so rows a and b share
  // one 256-bit vector [a | b]; code field f (channels 4p + f, byte p) is masked out in place and
  // multiplied with q2[f] (the query's field-f bytes in both halves). The 4 products summed in s16
  // lanes: 8 lanes per row, each at most 8 x 3 x 127, and any sum of them at most the whole
  // chunk's 64 x 3 x 127 = 24384 (no overflow). Per row pair: 3 shifts + 4 masks and, per query,
  // 4 maddubs + 3 adds.
  __m256i q2[NJ][BITS == 2 ? kMaxQ8Dim / 64 : 1][4];
  void dots_pair_2bit(const uint8_t* a, const uint8_t* b, int c, __m256i* out) const {
    const __m256i m2 = _mm256_set1_epi8(0x03);
    const __m256i x = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(b + 16 * c),
                                          reinterpret_cast<const __m128i*>(a + 16 * c));
    const __m256i f0 = _mm256_and_si256(x, m2), f1 = _mm256_and_si256(_mm256_srli_epi16(x, 2), m2);
    const __m256i f2 = _mm256_and_si256(_mm256_srli_epi16(x, 4), m2), f3 = _mm256_and_si256(_mm256_srli_epi16(x, 6), m2);
    for (int j = 0; j < NJ; ++j) {
      const __m256i p = add_maddubs_mem(maddubs_mem(f0, &q2[j][c][0]), f1, &q2[j][c][1]);
      out[j] = add_maddubs_mem(add_maddubs_mem(p, f2, &q2[j][c][2]), f3, &q2[j][c][3]);
    }
  }
  // One row's s16 products for chunk c (4 bits): 16 lanes, each at most 4 x 15 x 127 = 7620.
  void dots_row_4bit(const uint8_t* row, int c, __m256i* out) const {
    __m256i v[2];
    load_code_vecs<4>(row, c, v);
    for (int j = 0; j < NJ; ++j)
      out[j] = add_maddubs_mem(maddubs_mem(v[0], &qv[j][c][0]), v[1], &qv[j][c][1]);
  }
  // dots8 for 2 and 4 bits: per chunk, the s16 products of the 8 rows folded by three hadd_epi16
  // levels as soon as their inputs exist (few live registers), then one madd to int32 per chunk.
  //   2 bits  pair vectors [a | b] of rows (0,1), (2,3), (4,5), (6,7): hadd(p01, p23), hadd(p45,
  //           p67), hadd of those = [r0 r0 r2 r2 r4 r4 r6 r6 | r1 .. r7]; madd: [r0 r2 r4 r6 | r1 r3
  //           r5 r7]; one permute at the end. Every partial stays within the chunk's 24384.
  //   4 bits  rows 0-3 and 4-7: two hadd levels each = [r0 r0 r1 r1 r2 r2 r3 r3] per 128-bit half
  //           (partials at most 4 x 7620 = 30480), madd: [r0 r1 r2 r3 | r0 r1 r2 r3] (halves of
  //           the channels), the halves added at the end.
  void dots8_bytes(const uint8_t* rows, size_t row_bytes, __m256i* tot) const {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[2][NJ];
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < NJ; ++j) acc[h][j] = _mm256_setzero_si256();
    for (int c = 0; c < (CH ? CH : chunks); ++c) {
      __m256i g[2][NJ];  // 2 bits: rows (0-3), (4-7) pair vectors folded; 4 bits: rows 0-3, 4-7
      for (int h = 0; h < 2; ++h) {
        __m256i a[NJ], b[NJ], p[NJ];
        const uint8_t* r = rows + (size_t)(4 * h) * row_bytes;
        if constexpr (BITS == 2) {
          dots_pair_2bit(r, r + row_bytes, c, a);
          dots_pair_2bit(r + 2 * row_bytes, r + 3 * row_bytes, c, p);
          for (int j = 0; j < NJ; ++j) g[h][j] = _mm256_hadd_epi16(a[j], p[j]);
        } else {
          dots_row_4bit(r, c, a);
          dots_row_4bit(r + row_bytes, c, p);
          for (int j = 0; j < NJ; ++j) a[j] = _mm256_hadd_epi16(a[j], p[j]);
          dots_row_4bit(r + 2 * row_bytes, c, b);
          dots_row_4bit(r + 3 * row_bytes, c, p);
          for (int j = 0; j < NJ; ++j) g[h][j] = _mm256_madd_epi16(_mm256_hadd_epi16(a[j], _mm256_hadd_epi16(b[j], p[j])), ones);
        }
      }
      for (int j = 0; j < NJ; ++j) {
        if constexpr (BITS == 2) {
          acc[0][j] = _mm256_add_epi32(acc[0][j], _mm256_madd_epi16(_mm256_hadd_epi16(g[0][j], g[1][j]), ones));
        } else {
          acc[0][j] = _mm256_add_epi32(acc[0][j], g[0][j]);
          acc[1][j] = _mm256_add_epi32(acc[1][j], g[1][j]);
        }
      }
    }
    for (int j = 0; j < NJ; ++j) {
      if constexpr (BITS == 2) {
        tot[j] = _mm256_permutevar8x32_epi32(acc[0][j], _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      } else {
        tot[j] = _mm256_add_epi32(_mm256_permute2x128_si256(acc[0][j], acc[1][j], 0x20),
                                  _mm256_permute2x128_si256(acc[0][j], acc[1][j], 0x31));
      }
    }
  }
  void dots(const uint8_t* row, __m256i* out) const {
    for (int j = 0; j < NJ; ++j) out[j] = _mm256_setzero_si256();
    for (int c = 0; c < (CH ? CH : chunks); ++c) {
      __m256i v[V];
      load_code_vecs<BITS>(row, c, v);
      for (int j = 0; j < NJ; ++j) out[j] = _mm256_add_epi32(out[j], dot_vecs<BITS>(v, qv[j][c]));
    }
  }
  // Exact integer dots of 8 consecutive rows: lane k of tot[j] = q8_j . code of row k. Pairs of rows
  // are folded with hadd as soon as they exist, so no row vector is stored.
  void dots8(const uint8_t* rows, size_t row_bytes, __m256i* tot) const {
    if constexpr (BITS <= 4) return dots8_bytes(rows, row_bytes, tot);
    __m256i h[2][NJ];
    for (int half = 0; half < 2; ++half) {
      __m256i p[2][NJ];
      for (int pair = 0; pair < 2; ++pair) {
        __m256i r0[NJ], r1[NJ];
        const uint8_t* r = rows + (size_t)(4 * half + 2 * pair) * row_bytes;
        dots(r, r0);
        dots(r + row_bytes, r1);
        for (int j = 0; j < NJ; ++j) p[pair][j] = _mm256_hadd_epi32(r0[j], r1[j]);
      }
      for (int j = 0; j < NJ; ++j) h[half][j] = _mm256_hadd_epi32(p[0][j], p[1][j]);
    }
    for (int j = 0; j < NJ; ++j)
      tot[j] = _mm256_add_epi32(_mm256_add_epi32(_mm256_permute2x128_si256(h[0][j], h[1][j], 0x20),
                                                 _mm256_permute2x128_si256(h[0][j], h[1][j], 0x31)),
                                _mm256_set1_epi32(bias[j]));
  }

  // Rows [0, n) from `rows`: emit8(i, tot) for each 8 rows at i, emit1(i, dot) per query for the
  // rest (dot: int32[NJ]).
  template <class Emit8, class Emit1>
  void run(const uint8_t* rows, size_t row_bytes, int n, Emit8&& emit8, Emit1&& emit1) const {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256i tot[NJ];
      dots8(rows + (size_t)i * row_bytes, row_bytes, tot);
      emit8(i, tot);
    }
    for (; i < n; ++i) {
      __m256i r[NJ];
      dots(rows + (size_t)i * row_bytes, r);
      int32_t dot[NJ];
      for (int j = 0; j < NJ; ++j) dot[j] = hsum_epi32(r[j]) + bias[j];
      emit1(i, dot);
    }
  }
};

// Token axis, one group per row: s = (S m) (qs (q8 . code)) + Z sum(q).
template <int BITS, int NJ, int CH>
void scores_q8_token(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int j0, int t0, int n, float* s,
                     size_t lds) {
  Q8Tile<BITS, NJ, CH> T;
  for (int j = 0; j < NJ; ++j) T.set_query(j, q.natural + (size_t)(j0 + j) * q.d, q.d);
  float* sj0 = s + (size_t)j0 * lds;
  T.run(blk + L.codes_offset + (size_t)t0 * L.row_bytes, L.row_bytes, n,
        [&](int i, const __m256i* tot) {
          const __m256 S = scales8_at(L, blk, (size_t)(t0 + i));
          const __m256 Z = load_h8(blk + L.zeros_offset + 2 * (size_t)(t0 + i));
          for (int j = 0; j < NJ; ++j) {
            const __m256 dotf = _mm256_mul_ps(_mm256_cvtepi32_ps(tot[j]), _mm256_set1_ps(q.scale[j0 + j]));
            _mm256_storeu_ps(sj0 + j * lds + i, _mm256_fmadd_ps(S, dotf, _mm256_mul_ps(Z, _mm256_set1_ps(q.sum[j0 + j]))));
          }
        },
        [&](int i, const int32_t* dot) {
          const float S = scale_at(L, blk, (size_t)(t0 + i)), Z = half_at(blk, L.zeros_offset, (size_t)(t0 + i));
          for (int j = 0; j < NJ; ++j) sj0[j * lds + i] = S * (q.scale[j0 + j] * (float)dot[j]) + Z * q.sum[j0 + j];
        });
}

// The block's true scales S_k m and zeros Z_k at parameter indices p0 .. p0 + n - 1 (consecutive:
// a channel-axis token group's channels, or one-group-per-row tokens) as fp32, once for all the
// queries or weight rows folded with them (fold_params_q8).
struct GroupParams {
  alignas(32) float S[kMaxKernelRows];
  alignas(32) float Z[kMaxKernelRows];
  int n = 0;
  GroupParams(const KvBlockLayout& L, const uint8_t* blk, size_t p0, int count) : n(count) {
    static_assert(kMaxKernelRows >= kMaxQ8Dim, "one size serves both callers");
    int k = 0;
    for (; k + 8 <= n; k += 8) {
      _mm256_store_ps(S + k, scales8_at(L, blk, p0 + k));
      _mm256_store_ps(Z + k, load_h8(blk + L.zeros_offset + 2 * (p0 + k)));
    }
    for (; k < n; ++k) S[k] = scale_at(L, blk, p0 + k), Z[k] = half_at(blk, L.zeros_offset, p0 + k);
  }
};

// For NJ vectors x_j (x + j ldx): products x_jk (S_k m), k < P.n, quantized to int8 by the
// Q8Queries rule into q8 + j ldq8 (zero-padded to a multiple of 32); step[j] = the step,
// z[j] = sum_k x_jk Z_k. The same fp32 operations in the same order as fold_channel_query /
// quantize_weights_q8 followed by quantize_q8_row, so the int8 values and the steps are bit for bit
// _ref's; z is summed in another order (fp32 rounding only). The NJ vectors go through each pass
// together: their dependency chains (maximum, zero sum, step division) overlap, and S, Z are loaded
// once for all.
template <int NJ>
inline void fold_params_q8(const GroupParams& P, const float* x, size_t ldx, int8_t* q8, size_t ldq8, float* step, float* z) {
  const int n = P.n, padded = (n + 31) / 32 * 32;
  alignas(32) float f[NJ][kMaxKernelRows + 32];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax[NJ], zs[NJ];
  for (int j = 0; j < NJ; ++j) amax[j] = zs[j] = _mm256_setzero_ps();
  int k8 = 0;
  for (; k8 + 8 <= n; k8 += 8) {
    const __m256 S = _mm256_load_ps(P.S + k8), Z = _mm256_load_ps(P.Z + k8);
    for (int j = 0; j < NJ; ++j) {
      const __m256 xv = _mm256_loadu_ps(x + j * ldx + k8);
      const __m256 fv = _mm256_mul_ps(xv, S);
      _mm256_store_ps(f[j] + k8, fv);
      amax[j] = _mm256_max_ps(amax[j], _mm256_and_ps(fv, abs_mask));
      zs[j] = _mm256_fmadd_ps(xv, Z, zs[j]);
    }
  }
  __m256 inv[NJ];
  for (int j = 0; j < NJ; ++j) {
    const float* xj = x + j * ldx;
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax[j]), _mm256_extractf128_ps(amax[j], 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float am = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1))), zsum = hsum(zs[j]);
    int k = k8;
    for (; k < n; ++k) {
      f[j][k] = xj[k] * P.S[k];
      am = std::max(am, std::abs(f[j][k]));
      zsum += xj[k] * P.Z[k];
    }
    for (; k < padded; ++k) f[j][k] = 0.0f;
    step[j] = am / 127.0f;
    inv[j] = _mm256_set1_ps(step[j] > 0 ? 1.0f / step[j] : 0.0f);
    z[j] = zsum;
  }
  for (int k = 0; k < padded; k += 32) {
    for (int j = 0; j < NJ; ++j) {
      __m256i v[4];
      for (int u = 0; u < 4; ++u) v[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(f[j] + k + 8 * u), inv[j]));  // ties to even
      const __m256i b8 = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q8 + j * ldq8 + k),
                          _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
  }
}

// The token groups of a channel-axis (KIVI) key block that rows [t0, t0 + n) touch: per group, the
// queries j0 .. j0 + NJ - 1 folded with the group's channel scales and requantized by
// fold(p0, d, x, ldx, q8, ldq8, qs, zt) (the group's parameters are [p0, p0 + d) of the block;
// fold_params_q8<NJ> over their GroupParams, or a wider copy of it: writes each query's int8
// values, qs'_g and sum_c q_c Z_gc) into a fresh Tile (set_query), then rows(T, i, end, qs, zt) for
// the group's rows [i, end) of the call.
template <class Tile, int NJ, class Fold, class Rows>
void for_each_key_group(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int j0, int t0, int n,
                        Fold&& fold, Rows&& rows) {
  const int d = L.head_dim;
  constexpr size_t kLd = kMaxQ8Dim + 64;
  alignas(64) int8_t q8[NJ][kLd];
  for (int i = 0; i < n;) {
    const int tg = (t0 + i) / L.group, end = std::min(n, (tg + 1) * L.group - t0);
    Tile T;
    float qs[NJ], zt[NJ];
    fold((size_t)tg * d, d, q.f + (size_t)j0 * q.ldf, q.ldf, &q8[0][0], kLd, qs, zt);
    for (int j = 0; j < NJ; ++j) T.set_query(j, q8[j], d);
    rows(T, i, end, qs, zt);
    i = end;
  }
}

// Channel axis (KIVI keys): per token group, each query's folded int8 copy, then
// s = qs'_g (q8' . code) + sum_c q_c Z_gc.
template <int BITS, int NJ, int CH>
void scores_q8_channel(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int j0, int t0, int n,
                       float* s, size_t lds) {
  float* sj0 = s + (size_t)j0 * lds;
  for_each_key_group<Q8Tile<BITS, NJ, CH>, NJ>(
      L, blk, q, j0, t0, n,
      [&](size_t p0, int count, const float* x, size_t ldx, int8_t* q8, size_t ldq8, float* qs, float* zt) {
        fold_params_q8<NJ>(GroupParams(L, blk, p0, count), x, ldx, q8, ldq8, qs, zt);
      },
      [&](const auto& T, int i, int end, const float* qs, const float* zt) {
        T.run(blk + L.codes_offset + (size_t)(t0 + i) * L.row_bytes, L.row_bytes, end - i,
              [&](int k, const __m256i* tot) {
                for (int j = 0; j < NJ; ++j)
                  _mm256_storeu_ps(sj0 + j * lds + i + k, _mm256_fmadd_ps(_mm256_set1_ps(qs[j]), _mm256_cvtepi32_ps(tot[j]),
                                                                          _mm256_set1_ps(zt[j])));
              },
              [&](int k, const int32_t* dot) {
                for (int j = 0; j < NJ; ++j) sj0[j * lds + i + k] = qs[j] * (float)dot[j] + zt[j];
              });
      });
}


// Bit-widths whose codes unpack to whole bytes or words (the int8 kernels and the row-group loop).
template <int BITS>
constexpr bool kByteFriendly = BITS == 2 || BITS == 4 || BITS == 8 || BITS == 16;

// ---- int8 weights x 2- / 4-bit value codes (q8_values_apply layouts) ---------------------------
//
// Rows i and i + 1 are decoded together into 4 vectors of byte pairs (code_i[c], code_i+1[c]), so
// one maddubs against the broadcast weight pair (w8_i, w8_i+1) adds both rows' products for 16
// channels into s16 lanes. The two rows' bytes are interleaved first (one unpack per half: byte pair
// b = (row i byte b, row i+1 byte b)), then each code field is masked out in place, so no shuffle
// follows the decode (4 bits: 2 unpacks + 6 shift / mask ops per row pair and 64 channels; 2 bits:
// 3 + 7). The price is a channel order of the s16 lanes that is not the natural one; the int32 sums
// are kept in that "slot" order (slot 16 m + p = lane p of vector m, per 64 channels) and put back
// in channel order once per call (unpermute_slots):
//   4 bits  lane p = 8 L + q of vector m = 2 h + k: byte b = 16 L + 8 h + q, channel 2 b + k
//   2 bits  lane p of vector m: byte p, field m, channel 4 p + m
// The s16 sums are widened into int32 before they can overflow: a pair adds at most
// 2 x (2^bits - 1) x 127, so 8 pairs at 4 bits (30480) and 32 pairs at 2 bits (24384).

// The two rows' bytes of chunk c interleaved (byte pair b = (row 0 byte b, row 1 byte b)):
//   4 bits  x[0] = unpacklo, x[1] = unpackhi of the two 32-byte runs
//   2 bits  x[0] = [unpacklo | unpackhi] of the two 16-byte runs
template <int BITS>
inline void interleave_code_pairs(const uint8_t* r0, const uint8_t* r1, int c, __m256i* x) {
  if constexpr (BITS == 4) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + 32 * c));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + 32 * c));
    x[0] = _mm256_unpacklo_epi8(a, b);
    x[1] = _mm256_unpackhi_epi8(a, b);
  } else {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 16 * c));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + 16 * c));
    x[0] = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
  }
}

// Code vector m (of 4) of an interleaved pair, its field masked in place:
//   4 bits  m = 2 h + k: nibble k of x[h];   2 bits  field m of x[0]
template <int BITS, int m>
inline __m256i code_pair_field(const __m256i* x) {
  constexpr int kShift = BITS == 4 ? 4 * (m % 2) : 2 * m;
  const __m256i v = x[BITS == 4 ? m / 2 : 0];
  const __m256i f = kShift ? _mm256_srli_epi16(v, kShift) : v;
  return _mm256_and_si256(f, _mm256_set1_epi8((1 << BITS) - 1));
}

// 64 floats of one chunk from slot order (f[k] = slots 8k .. 8k + 7) to channel order (o[k] =
// channels 8k .. 8k + 7), by the maps of code_pair_field.
template <int BITS>
inline void unpermute_slots(const __m256* f, __m256* o) {
  if constexpr (BITS == 4) {
    // f[4h + L] (k = 0) and f[4h + 2 + L] (k = 1) hold channels 32 L + 16 h + 2 q + k, q < 8.
    for (int L = 0; L < 2; ++L) {
      for (int h = 0; h < 2; ++h) {
        const __m256 e = f[4 * h + L], od = f[4 * h + 2 + L];
        const __m256 lo = _mm256_unpacklo_ps(e, od), hi = _mm256_unpackhi_ps(e, od);
        o[4 * L + 2 * h] = _mm256_permute2f128_ps(lo, hi, 0x20);
        o[4 * L + 2 * h + 1] = _mm256_permute2f128_ps(lo, hi, 0x31);
      }
    }
  } else {
    // f[2m + h] holds channels 32 h + 4 p' + m, p' < 8: a 4 x 8 transpose per h.
    for (int h = 0; h < 2; ++h) {
      const __m256 t0 = _mm256_unpacklo_ps(f[h], f[2 + h]), t1 = _mm256_unpacklo_ps(f[4 + h], f[6 + h]);
      const __m256 t2 = _mm256_unpackhi_ps(f[h], f[2 + h]), t3 = _mm256_unpackhi_ps(f[4 + h], f[6 + h]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t1, 0x44), u1 = _mm256_shuffle_ps(t0, t1, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t2, t3, 0x44), u3 = _mm256_shuffle_ps(t2, t3, 0xEE);
      o[4 * h] = _mm256_permute2f128_ps(u0, u1, 0x20);
      o[4 * h + 1] = _mm256_permute2f128_ps(u2, u3, 0x20);
      o[4 * h + 2] = _mm256_permute2f128_ps(u0, u1, 0x31);
      o[4 * h + 3] = _mm256_permute2f128_ps(u2, u3, 0x31);
    }
  }
}

// One query's value sums in slot order (a32, 64 per chunk, 32-byte aligned) onto out[0, 64 chunks):
// out[c] += step * a32[slot of c] + bz, the epilogue every packed_accumulate_q8 variant shares.
template <int BITS>
inline void add_value_sums(const int32_t* a32, float step, float bz, int chunks, float* out) {
  const __m256 sv = _mm256_set1_ps(step), zv = _mm256_set1_ps(bz);
  for (int c = 0; c < chunks; ++c) {
    __m256 f[8], o[8];
    for (int k = 0; k < 8; ++k)
      f[k] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(a32 + 64 * c + 8 * k))), zv);
    unpermute_slots<BITS>(f, o);
    float* oc = out + 64 * c;
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(oc + 8 * k, _mm256_add_ps(_mm256_loadu_ps(oc + 8 * k), o[k]));
  }
}

// ACC_REGS: the s16 accumulators the target keeps in registers beside the decode (AVX2's 16 vector
// registers: 12; AVX-512's 32: all 16 of a 4-query tile). Each pass over the rows accumulates M of
// the 4 code vectors of a 64-channel chunk for all NJ queries (NJ x M <= ACC_REGS), so a tile of up
// to 3 queries decodes each row pair once on AVX2, a 4-query tile twice. Each query's weight pair is
// broadcast from memory at each use (add_maddubs_bcast): no register holds weights in the loop
// (NJ of them beside 12 accumulators made GCC spill every pair).
template <int BITS, int NJ, int ACC_REGS>
void accumulate_q8(const KvBlockLayout& L, const uint8_t* blk, const float* w, size_t ldw, int t0, int n, float* acc,
                   size_t ldacc) {
  constexpr int kPairsPerWiden = BITS == 4 ? 8 : 32;
  constexpr int M = NJ * 4 <= ACC_REGS ? 4 : 2;  // code vectors per pass
  if (n <= 0) return;  // nothing to add (and the widening below would leave a32 unset)
  const int d = L.head_dim, chunks = d / 64;
  alignas(32) int8_t w8[NJ][kMaxKernelRows + 32];
  float step[NJ], bz[NJ];
  const GroupParams P(L, blk, (size_t)t0, n);
  fold_params_q8<NJ>(P, w, ldw, &w8[0][0], kMaxKernelRows + 32, step, bz);
  // Each weight pair (w8_i, w8_i+1) as a 32-bit word holding it twice, broadcast in the loop as
  // maddubs' operand. Built 16 pairs per unpack pair from w8, which fold_params_q8 zero-padded to a
  // multiple of 32 bytes (so an odd tail row pairs with a zero weight).
  alignas(32) int32_t wpair[NJ][kMaxKernelRows / 2];
  const int pairs = (n + 1) / 2;
  for (int j = 0; j < NJ; ++j) {
    for (int p = 0; p < pairs; p += 16) {
      const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(&w8[j][2 * p]));
      const __m256i lo = _mm256_unpacklo_epi16(x, x), hi = _mm256_unpackhi_epi16(x, x);
      _mm256_store_si256(reinterpret_cast<__m256i*>(&wpair[j][p]), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_store_si256(reinterpret_cast<__m256i*>(&wpair[j][p + 8]), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
  alignas(32) int32_t a32[NJ][kMaxQ8Dim];  // slot order; the first widening block stores, later ones add
  const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes;
  // One pass over the rows for code vectors [MH, MH + M) of chunk c.
  auto pass = [&](int c, auto MH) {
    constexpr int mh = decltype(MH)::value;
    for (int i0 = 0; i0 < n; i0 += 2 * kPairsPerWiden) {
      const int i1 = std::min(n, i0 + 2 * kPairsPerWiden);
      __m256i s16[NJ][M];
      for (int j = 0; j < NJ; ++j)
        for (int m = 0; m < M; ++m) s16[j][m] = _mm256_setzero_si256();
      // Row pairs (i, i + 1); an odd last row pairs with itself, its zero weight (w8 padding)
      // making the second copy add nothing.
      // Pointers bumped per pair (no index arithmetic in the loop: scalar uops share the vector ports).
      const uint8_t* r0 = codes + (size_t)i0 * L.row_bytes;
      const int32_t* wp = &wpair[0][i0 / 2];  // query j's word at wp + j * kMaxKernelRows / 2
      for (int i = i0; i < i1; i += 2, r0 += 2 * L.row_bytes, ++wp) {
        __m256i x[2];
        interleave_code_pairs<BITS>(r0, i + 1 < n ? r0 + L.row_bytes : r0, c, x);
        auto add_field = [&](auto Mi) {  // one code vector at a time: few registers live
          constexpr int m = decltype(Mi)::value;
          const __m256i f = code_pair_field<BITS, mh + m>(x);
          for (int j = 0; j < NJ; ++j) s16[j][m] = add_maddubs_bcast(s16[j][m], f, wp + j * (kMaxKernelRows / 2));
        };
        add_field(std::integral_constant<int, 0>{});
        add_field(std::integral_constant<int, 1>{});
        if constexpr (M == 4) {
          add_field(std::integral_constant<int, 2>{});
          add_field(std::integral_constant<int, 3>{});
        }
      }
      for (int j = 0; j < NJ; ++j) {
        for (int m = 0; m < M; ++m) {
          int32_t* lo = &a32[j][64 * c + 16 * (mh + m)];
          const __m256i wl = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(s16[j][m]));
          const __m256i wh = _mm256_cvtepi16_epi32(_mm256_extracti128_si256(s16[j][m], 1));
          __m256i* lv = reinterpret_cast<__m256i*>(lo);
          if (i0 == 0) {
            _mm256_store_si256(lv, wl);
            _mm256_store_si256(lv + 1, wh);
          } else {
            _mm256_store_si256(lv, _mm256_add_epi32(_mm256_load_si256(lv), wl));
            _mm256_store_si256(lv + 1, _mm256_add_epi32(_mm256_load_si256(lv + 1), wh));
          }
        }
      }
    }
  };
  for (int c = 0; c < chunks; ++c) {
    pass(c, std::integral_constant<int, 0>{});
    if constexpr (M == 2) pass(c, std::integral_constant<int, 2>{});
  }
  for (int j = 0; j < NJ; ++j) add_value_sums<BITS>(a32[j], step[j], bz[j], chunks, acc + j * ldacc);
}

// packed_scores_q8 (paged_attention_kernels.h) in tiles of up to kTile queries.
inline void scores_q8_tiles(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds) {
  const KvBlockLayout& L = *b.layout;
  for (int j0 = 0; j0 < q.nq; j0 += kTile) {
    with_tile(std::min(kTile, q.nq - j0), [&](auto NJ) {
      with_bits(L.bits, [&](auto B) {
        constexpr int bits = decltype(B)::value, nj = decltype(NJ)::value;
        if constexpr (kByteFriendly<bits>) {  // q8_scores_apply: never 1 or 3 bits
          const bool d64 = L.head_dim == 64;
          if (L.axis == GroupAxis::token) {
            (d64 ? scores_q8_token<bits, nj, 1> : scores_q8_token<bits, nj, 0>)(L, b.data, q, j0, t0, n, s, lds);
          } else {
            (d64 ? scores_q8_channel<bits, nj, 1> : scores_q8_channel<bits, nj, 0>)(L, b.data, q, j0, t0, n, s, lds);
          }
        }
      });
    });
  }
}

// packed_accumulate_q8 (paged_attention_kernels.h) in tiles of up to kTile queries.
template <int ACC_REGS>
void accumulate_q8_tiles(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                         size_t ldacc) {
  const KvBlockLayout& L = *b.layout;
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      constexpr int nj = decltype(NJ)::value;
      if (L.bits == 4) {
        accumulate_q8<4, nj, ACC_REGS>(L, b.data, w + j0 * ldw, ldw, t0, n, acc + j0 * ldacc, ldacc);
      } else {
        accumulate_q8<2, nj, ACC_REGS>(L, b.data, w + j0 * ldw, ldw, t0, n, acc + j0 * ldacc, ldacc);
      }
    });
  }
}

}  // namespace
}  // namespace mpkv

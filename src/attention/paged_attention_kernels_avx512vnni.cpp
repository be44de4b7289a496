// AVX-512 VNNI variants of the int8 paged-attention kernels (paged_attention_kernels.h:
// packed_scores_q8 and packed_accumulate_q8 for uniform 2- and 4-bit codes; 8- and 16-bit keys take
// the AVX-512 kernels of paged_attention_q8_simd.h, compiled here too). Called only when
// cpu_features().avx512vnni: the avx512 tier's table on such CPUs (paged_attention_kernels.cpp).
//
// vpdpbusd adds, per 32-bit lane, the products of 4 unsigned bytes (codes) and 4 signed bytes
// (int8 queries or weights) to an int32 sum: one instruction for the maddubs + madd + add of the
// 256-bit kernels, with no s16 stage to widen. The integer sums are the same exact integers; the
// int8 queries / weights and their steps are _ref's (fold_params_q8_512: the same fp32 products and
// rounding). Token-axis scores use the 256-bit kernels' 8-row epilogue, so they equal those bit for
// bit; the zero terms of folded groups (sum_c q_c Z_gc, sum_i w_i Z_i) are summed in 16 lanes, an
// fp32 order of their own (docs/numerics.md: tiers agree within fp32 tolerance, not bit for bit).
//
// Scores, 4 rows per 512-bit vector (one row per 128-bit lane), per 64 channels:
//   2 bits  a row's 16 bytes; field f (channel 4p + f of byte p) masked in place, times the query's
//           field-f bytes broadcast to all 4 lanes: 4 vpdpbusd per query and 4 rows
//   4 bits  bytes [0, 16) and [16, 32) of the 4 rows in two vectors (lanes = rows), low and high
//           nibbles masked in place: again 4 vectors and 4 vpdpbusd per query
// Each lane then holds 4 partial sums of its row; 16 rows (4 vectors per query) are folded into one
// vector of 16 row dots by 2 unpack levels and one permute (fold_rows16).
// Values, 4 rows per vpdpbusd: the 4 rows' bytes at the same offset are gathered into one 32-bit
// lane (a dword permute and a byte shuffle per 128-bit lane), the code fields masked in place, and
// each query's 4 int8 weights of those rows broadcast as one dword: acc[c] += sum_{r<4} w8_r code_r[c].
// The lanes land in the slot order of the 256-bit kernels (paged_attention_q8_simd.h,
// code_pair_field), so add_value_sums puts them back in channel order.
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports as a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "attention/paged_attention_kernels.h"
#include "attention/paged_attention_q8_simd.h"

namespace mpkv {
namespace {  // internal linkage: VNNI code must never be merged with other copies

// Bytes [16 c, 16 c + 16) (2 bits) or [32 c, 32 c + 32) (4 bits) of rows r .. r + 3 (row stride rb),
// rows >= valid read as zeros (masked loads: never past the block):
//   2 bits  x[0]: lane k = row k
//   4 bits  x[0] = [row 0 | row 1], x[1] = [row 2 | row 3] (256 bits each)
// CH = 1: the chunk is the whole row, so the 4 rows are one contiguous stretch.
template <int BITS, int CH>
inline void load_rows4(const uint8_t* r, size_t rb, int c, int valid, __m512i* x) {
  constexpr int kRowBytes = BITS * 8;  // per 64 channels
  if constexpr (CH == 1) {
    constexpr int kVecs = BITS == 2 ? 1 : 2, kRowsPerVec = 4 / kVecs;
    for (int v = 0; v < kVecs; ++v) {
      const int rows = std::clamp(valid - kRowsPerVec * v, 0, kRowsPerVec);
      const __mmask64 m = rows == kRowsPerVec ? ~(__mmask64)0 : (((__mmask64)1 << (kRowBytes * rows)) - 1);
      x[v] = _mm512_maskz_loadu_epi8(m, r + 64 * v);
    }
  } else if constexpr (BITS == 2) {
    auto row = [&](int k) { return _mm_maskz_loadu_epi8(k < valid ? 0xFFFF : 0, r + (size_t)k * rb + 16 * c); };
    const __m512i lo = _mm512_inserti32x4(_mm512_castsi128_si512(row(0)), row(1), 1);
    x[0] = _mm512_inserti32x4(_mm512_inserti32x4(lo, row(2), 2), row(3), 3);
  } else {
    auto row = [&](int k) { return _mm256_maskz_loadu_epi8(k < valid ? 0xFFFFFFFFu : 0, r + (size_t)k * rb + 32 * c); };
    x[0] = _mm512_inserti64x4(_mm512_castsi256_si512(row(0)), row(1), 1);
    x[1] = _mm512_inserti64x4(_mm512_castsi256_si512(row(2)), row(3), 1);
  }
}

// Rows 4 g + L of a[g] (lane L holds 4 partial sums of its row) folded: pair_fold(a[0], a[1]) and
// pair_fold(a[2], a[3]) as soon as each pair exists (fewer live registers), then rows16_fold puts
// row 4 g + L at position 4 L + g and permutes it to position 4 g + L.
inline __m512i pair_fold(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
inline __m512i rows16_fold(__m512i u01, __m512i u23) {
  const __m512i w = _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), w);
}

// The byte transpose of every 128-bit lane: dword k of the result = bytes k, 4 + k, 8 + k, 12 + k.
inline __m512i lane_transpose4x4(__m512i x) {
  return _mm512_shuffle_epi8(x, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)));
}

// fold_params_q8 on 16 lanes for NJ vectors x_j (x + j ldx) over the block's parameters [p0, p0 + n):
// the same products x_jk (S_k m), maximum, step and rounding (so the same int8 values and steps as
// _ref's quantize_q8_row over the folded values), z_j = sum_k x_jk Z_k summed in 16 lanes (another
// order). q8 + j ldq8 is zero-padded to a multiple of 64 bytes. Two store-forwarding stalls are
// avoided (perf, docs/results/speed.md 11g): the scales and zeros are converted from fp16 here, 16
// at a time in registers and shared by the NJ vectors, where a GroupParams written in 8-float
// stores was read back in 16-float loads; and each 64 int8 values leave in one 64-byte store, which
// set_query's 64-byte load can forward (four 16-byte stores could not).
template <int NJ>
__attribute__((always_inline)) inline void fold_params_q8_512(const KvBlockLayout& L, const uint8_t* blk, size_t p0,
                                                              int n, const float* x, size_t ldx, int8_t* q8,
                                                              size_t ldq8, float* step, float* z) {
  alignas(64) float f[NJ][kMaxKernelRows + 64];
  const __m512 mult = _mm512_set1_ps(L.scale_mult);
  __m512 amax[NJ], zs[NJ];
  for (int j = 0; j < NJ; ++j) amax[j] = zs[j] = _mm512_setzero_ps();
  int k = 0;
  for (; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - k)) - 1u);
    const __m512 S = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, blk + L.scales_offset + 2 * (p0 + k))), mult);
    const __m512 Z = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, blk + L.zeros_offset + 2 * (p0 + k)));
    for (int j = 0; j < NJ; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + j * ldx + k);
      const __m512 fv = _mm512_mul_ps(xv, S);
      _mm512_store_ps(f[j] + k, fv);
      amax[j] = _mm512_max_ps(amax[j], _mm512_abs_ps(fv));
      zs[j] = _mm512_fmadd_ps(xv, Z, zs[j]);
    }
  }
  const int padded = (n + 63) / 64 * 64;
  for (; k < padded; k += 16)
    for (int j = 0; j < NJ; ++j) _mm512_store_ps(f[j] + k, _mm512_setzero_ps());
  __m512 inv[NJ];
  for (int j = 0; j < NJ; ++j) {
    step[j] = _mm512_reduce_max_ps(amax[j]) / 127.0f;
    inv[j] = _mm512_set1_ps(step[j] > 0 ? 1.0f / step[j] : 0.0f);
    z[j] = _mm512_reduce_add_ps(zs[j]);
  }
  for (k = 0; k < padded; k += 64)
    for (int j = 0; j < NJ; ++j) {
      __m128i b[4];  // cvtps: ties to even; vpmovsdb saturates like packs
      for (int u = 0; u < 4; ++u)
        b[u] = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(f[j] + k + 16 * u), inv[j])));
      const __m512i v = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(b[0]), b[1], 1), b[2], 2), b[3], 3);
      _mm512_storeu_si512(q8 + j * ldq8 + k, v);
    }
}

// NJ int8 queries for 2- or 4-bit key codes; dots16 gives the exact q8_j . code of 16 rows.
template <int BITS, int NJ, int CH>
struct VnniScoreTile {
  static_assert(BITS == 2 || BITS == 4, "byte-plane codes only");
  int chunks = CH;
  // Per query and chunk, the 4 query vectors matching the 4 code-field vectors (16 bytes broadcast
  // to the 4 lanes): 2 bits field f = channels 4 p + f; 4 bits low / high nibbles of bytes [0, 16)
  // then of bytes [16, 32) = channels 2 p, 2 p + 1, 32 + 2 p, 33 + 2 p.
  __m512i qv[NJ][kMaxQ8Dim / 64][4];

  void set_query(int j, const int8_t* q8, int d) {
    if constexpr (CH == 0) chunks = d / 64;
    // 2 bits: lane L of the transpose holds, in dword f, field f of bytes 4 L .. 4 L + 3 of the
    // field-f vector; 4 bits: a per-lane even / odd byte split, dwords 0-1 even, 2-3 odd channels.
    const __m512i even_odd = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m512i pick[2][4] = {
        {_mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12),
         _mm512_setr_epi32(1, 5, 9, 13, 1, 5, 9, 13, 1, 5, 9, 13, 1, 5, 9, 13),
         _mm512_setr_epi32(2, 6, 10, 14, 2, 6, 10, 14, 2, 6, 10, 14, 2, 6, 10, 14),
         _mm512_setr_epi32(3, 7, 11, 15, 3, 7, 11, 15, 3, 7, 11, 15, 3, 7, 11, 15)},
        {_mm512_setr_epi32(0, 1, 4, 5, 0, 1, 4, 5, 0, 1, 4, 5, 0, 1, 4, 5),
         _mm512_setr_epi32(2, 3, 6, 7, 2, 3, 6, 7, 2, 3, 6, 7, 2, 3, 6, 7),
         _mm512_setr_epi32(8, 9, 12, 13, 8, 9, 12, 13, 8, 9, 12, 13, 8, 9, 12, 13),
         _mm512_setr_epi32(10, 11, 14, 15, 10, 11, 14, 15, 10, 11, 14, 15, 10, 11, 14, 15)}};
    for (int c = 0; c < chunks; ++c) {
      const __m512i x = _mm512_loadu_si512(q8 + 64 * c);
      const __m512i t = BITS == 2 ? lane_transpose4x4(x) : _mm512_shuffle_epi8(x, even_odd);
      for (int k = 0; k < 4; ++k) qv[j][c][k] = _mm512_permutexvar_epi32(pick[BITS == 4][k], t);
    }
  }

  // The 4 code-field vectors of rows r .. r + 3, chunk c (lanes = rows).
  static void fields(const uint8_t* r, size_t rb, int c, int valid, __m512i* f) {
    __m512i x[2];
    load_rows4<BITS, CH>(r, rb, c, valid, x);
    if constexpr (BITS == 2) {
      const __m512i m2 = _mm512_set1_epi8(0x03);
      f[0] = _mm512_and_si512(x[0], m2);
      f[1] = _mm512_and_si512(_mm512_srli_epi16(x[0], 2), m2);
      f[2] = _mm512_and_si512(_mm512_srli_epi16(x[0], 4), m2);
      f[3] = _mm512_and_si512(_mm512_srli_epi16(x[0], 6), m2);
    } else {
      // Lanes [row 0 bytes 0-15, row 1 bytes 0-15, row 2 ..., row 3 ...] and the same for bytes 16-31.
      const __m512i a = _mm512_shuffle_i64x2(x[0], x[1], 0x88), b = _mm512_shuffle_i64x2(x[0], x[1], 0xDD);
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      f[0] = _mm512_and_si512(a, m4);
      f[1] = _mm512_and_si512(_mm512_srli_epi16(a, 4), m4);
      f[2] = _mm512_and_si512(b, m4);
      f[3] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
    }
  }

  // Rows [0, valid) of the 16 at `rows` (valid <= 16): lane i of out[j] = q8_j . code of row i
  // (0 for i >= valid).
  void dots16(const uint8_t* rows, size_t rb, int valid, __m512i* out) const {
    __m512i u[2][NJ];
    for (int half = 0; half < 2; ++half) {
      __m512i a[2][NJ];
      for (int e = 0; e < 2; ++e) {
        const int g = 2 * half + e, rv = valid - 4 * g;
        for (int j = 0; j < NJ; ++j) a[e][j] = _mm512_setzero_si512();
        if (rv <= 0) continue;
        for (int c = 0; c < (CH ? CH : chunks); ++c) {
          __m512i f[4];
          fields(rows + (size_t)(4 * g) * rb, rb, c, rv, f);
          for (int j = 0; j < NJ; ++j)
            for (int k = 0; k < 4; ++k) a[e][j] = _mm512_dpbusd_epi32(a[e][j], f[k], qv[j][c][k]);
        }
      }
      for (int j = 0; j < NJ; ++j) u[half][j] = pair_fold(a[0][j], a[1][j]);
    }
    for (int j = 0; j < NJ; ++j) out[j] = rows16_fold(u[0][j], u[1][j]);
  }
};

inline __mmask16 rows_mask(int valid) { return valid >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << valid) - 1u); }

// Token axis, one group per row: s = (S m) (qs (q8 . code)) + Z sum(q), as scores_q8_token's emit8.
template <int BITS, int NJ, int CH>
void scores_vnni_token(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int j0, int t0, int n, float* s,
                       size_t lds) {
  VnniScoreTile<BITS, NJ, CH> T;
  for (int j = 0; j < NJ; ++j) T.set_query(j, q.natural + (size_t)(j0 + j) * q.d, q.d);
  float* sj0 = s + (size_t)j0 * lds;
  const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes;
  const __m512 mult = _mm512_set1_ps(L.scale_mult);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = rows_mask(n - i);
    __m512i tot[NJ];
    T.dots16(codes + (size_t)i * L.row_bytes, L.row_bytes, n - i, tot);
    const size_t p = 2 * (size_t)(t0 + i);
    const __m512 S = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, blk + L.scales_offset + p)), mult);
    const __m512 Z = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, blk + L.zeros_offset + p));
    for (int j = 0; j < NJ; ++j) {
      const __m512 dotf = _mm512_mul_ps(_mm512_cvtepi32_ps(tot[j]), _mm512_set1_ps(q.scale[j0 + j]));
      _mm512_mask_storeu_ps(sj0 + j * lds + i, k, _mm512_fmadd_ps(S, dotf, _mm512_mul_ps(Z, _mm512_set1_ps(q.sum[j0 + j]))));
    }
  }
}

// Channel axis (KIVI keys): per token group, each query folded and requantized (fold_params_q8_512),
// then s = qs'_g (q8' . code) + sum_c q_c Z_gc, as scores_q8_channel's emit8.
template <int BITS, int NJ, int CH>
void scores_vnni_channel(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int j0, int t0, int n,
                         float* s, size_t lds) {
  float* sj0 = s + (size_t)j0 * lds;
  auto fold = [&](size_t p0, int count, const float* x, size_t ldx, int8_t* q8, size_t ldq8, float* qs, float* zt) {
    fold_params_q8_512<NJ>(L, blk, p0, count, x, ldx, q8, ldq8, qs, zt);
  };
  for_each_key_group<VnniScoreTile<BITS, NJ, CH>, NJ>(
      L, blk, q, j0, t0, n, fold, [&](const auto& T, int i, int end, const float* qs, const float* zt) {
        const uint8_t* codes = blk + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
        for (int k0 = 0; k0 < end - i; k0 += 16) {
          __m512i tot[NJ];
          T.dots16(codes + (size_t)k0 * L.row_bytes, L.row_bytes, end - i - k0, tot);
          const __mmask16 k = rows_mask(end - i - k0);
          for (int j = 0; j < NJ; ++j)
            _mm512_mask_storeu_ps(sj0 + j * lds + i + k0, k,
                                  _mm512_fmadd_ps(_mm512_set1_ps(qs[j]), _mm512_cvtepi32_ps(tot[j]), _mm512_set1_ps(zt[j])));
        }
      });
}

// The 4 code-field vectors of rows r .. r + 3, chunk c, for the value pass: lane p of vector m holds
// the 4 rows' codes of one channel (byte r = row r), in the slot order of code_pair_field:
//   2 bits  vector m, lane p: byte p, field m (channel 4 p + m)
//   4 bits  vector m = 2 h + k, lane p: byte 16 (p / 8) + 8 h + p % 8, nibble k
template <int BITS, int CH>
inline void value_fields(const uint8_t* r, size_t rb, int c, int valid, __m512i* f) {
  __m512i x[2];
  load_rows4<BITS, CH>(r, rb, c, valid, x);
  // Per 128-bit lane, dwords [row 0, row 1, row 2, row 3] of one byte offset become 4 dwords each
  // holding the 4 rows' bytes at one offset (lane_transpose4x4).
  if constexpr (BITS == 2) {
    // Lane L gets dword L of each row (row k's dword L at 4 k + L).
    const __m512i g = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), x[0]);
    const __m512i t = lane_transpose4x4(g);
    const __m512i m2 = _mm512_set1_epi8(0x03);
    f[0] = _mm512_and_si512(t, m2);
    f[1] = _mm512_and_si512(_mm512_srli_epi16(t, 2), m2);
    f[2] = _mm512_and_si512(_mm512_srli_epi16(t, 4), m2);
    f[3] = _mm512_and_si512(_mm512_srli_epi16(t, 6), m2);
  } else {
    // Vector h, lane L: dword D = 4 (L / 2) + 2 h + L % 2 of rows 0-3 (at D, 8 + D of x[0] and
    // 16 + D, 24 + D in permutex2var's numbering of x[1]).
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i idx[2] = {_mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 4, 12, 20, 28, 5, 13, 21, 29),
                            _mm512_setr_epi32(2, 10, 18, 26, 3, 11, 19, 27, 6, 14, 22, 30, 7, 15, 23, 31)};
    for (int h = 0; h < 2; ++h) {
      const __m512i t = lane_transpose4x4(_mm512_permutex2var_epi32(x[0], idx[h], x[1]));
      f[2 * h] = _mm512_and_si512(t, m4);
      f[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(t, 4), m4);
    }
  }
}

// packed_accumulate_q8 for NJ queries: weights folded and quantized as accumulate_q8 does, int32
// sums per slot by vpdpbusd (4 rows per instruction; the tail's missing rows are zero codes times
// the zero weights fold_params_q8_512 pads with), then add_value_sums.
template <int BITS, int NJ, int CH>
void accumulate_vnni(const KvBlockLayout& L, const uint8_t* blk, const float* w, size_t ldw, int t0, int n, float* acc,
                     size_t ldacc) {
  const int d = L.head_dim, chunks = CH ? CH : d / 64;
  alignas(64) int8_t w8[NJ][kMaxKernelRows + 64];
  float step[NJ], bz[NJ];
  fold_params_q8_512<NJ>(L, blk, (size_t)t0, n, w, ldw, &w8[0][0], kMaxKernelRows + 64, step, bz);
  alignas(64) int32_t a32[NJ][kMaxQ8Dim];  // slot order
  const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes;
  for (int c = 0; c < chunks; ++c) {
    __m512i s[NJ][4];
    for (int j = 0; j < NJ; ++j)
      for (int m = 0; m < 4; ++m) s[j][m] = _mm512_setzero_si512();
    for (int i = 0; i < n; i += 4) {
      __m512i f[4];
      value_fields<BITS, CH>(codes + (size_t)i * L.row_bytes, L.row_bytes, c, n - i, f);
      for (int j = 0; j < NJ; ++j) {
        int32_t w4;
        std::memcpy(&w4, &w8[j][i], 4);
        const __m512i wv = _mm512_set1_epi32(w4);
        for (int m = 0; m < 4; ++m) s[j][m] = _mm512_dpbusd_epi32(s[j][m], f[m], wv);
      }
    }
    for (int j = 0; j < NJ; ++j)
      for (int m = 0; m < 4; ++m) _mm512_store_si512(&a32[j][64 * c + 16 * m], s[j][m]);
  }
  for (int j = 0; j < NJ; ++j) add_value_sums<BITS>(a32[j], step[j], bz[j], chunks, acc + j * ldacc);
}

}  // namespace

void packed_scores_q8_avx512vnni(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds) {
  const KvBlockLayout& L = *b.layout;
  if (L.bits != 2 && L.bits != 4) return scores_q8_tiles(b, q, t0, n, s, lds);
  for (int j0 = 0; j0 < q.nq; j0 += kTile) {
    with_tile(std::min(kTile, q.nq - j0), [&](auto NJ) {
      constexpr int nj = decltype(NJ)::value;
      auto run = [&](auto B) {
        constexpr int bits = decltype(B)::value;
        const bool d64 = L.head_dim == 64;
        if (L.axis == GroupAxis::token) {
          (d64 ? scores_vnni_token<bits, nj, 1> : scores_vnni_token<bits, nj, 0>)(L, b.data, q, j0, t0, n, s, lds);
        } else {
          (d64 ? scores_vnni_channel<bits, nj, 1> : scores_vnni_channel<bits, nj, 0>)(L, b.data, q, j0, t0, n, s, lds);
        }
      };
      if (L.bits == 2) run(std::integral_constant<int, 2>{});
      else run(std::integral_constant<int, 4>{});
    });
  }
}

void packed_accumulate_q8_avx512vnni(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n,
                                     float* acc, size_t ldacc) {
  const KvBlockLayout& L = *b.layout;
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      constexpr int nj = decltype(NJ)::value;
      auto run = [&](auto B) {
        constexpr int bits = decltype(B)::value;
        (L.head_dim == 64 ? accumulate_vnni<bits, nj, 1> : accumulate_vnni<bits, nj, 0>)(L, b.data, w + j0 * ldw, ldw, t0,
                                                                                         n, acc + j0 * ldacc, ldacc);
      };
      if (L.bits == 2) run(std::integral_constant<int, 2>{});
      else run(std::integral_constant<int, 4>{});
    });
  }
}

}  // namespace mpkv

// AVX2 + FMA + F16C variants of the paged attention kernels (compiled with those flags only here).
// Fast paths: uniform token-axis blocks (group % 8 == 0) at bits 1, 2, 3, 4, 8, 16; channel-axis
// key scores (KIVI, head_dim <= 512); fp16 rows (d % 8 == 0); exp_sum. Else the _ref kernel.
// The int8 kernels (q8 scores: every q8_scores_apply layout; q8 values: q8_values_apply) are
// integer madds over codes unpacked to bytes / words, with the block's scales folded into the
// query or the weights once per group (paged_attention_kernels.h).
//
// Queries are processed in tiles of up to 4 so their accumulators stay in registers while each
// packed 8-code run is decoded once (one broadcast + variable shift, kv_block_layout.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "attention/paged_attention_kernels.h"

namespace mpkv {
namespace {  // internal linkage: AVX2 code must never be merged with other copies

constexpr int kTile = 4;
constexpr int kMaxFoldDim = 512;  // channel-axis scores keep kTile folded queries of this many floats

template <int BITS>
__m256i lane_shifts8() {
  return _mm256_setr_epi32(0, BITS, 2 * BITS, 3 * BITS, 4 * BITS, 5 * BITS, 6 * BITS, 7 * BITS);
}

// 8 codes starting at byte p -> 8 floats.
template <int BITS>
__m256 decode8(const uint8_t* p) {
  __m256i c;
  if constexpr (BITS == 16) {
    c = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (BITS == 8) {
    c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else {
    uint32_t w;
    if constexpr (BITS == 3) {
      w = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    } else {
      w = 0;
      std::memcpy(&w, p, BITS);
    }
    c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), lane_shifts8<BITS>()),
                         _mm256_set1_epi32((1 << BITS) - 1));
  }
  return _mm256_cvtepi32_ps(c);
}

inline __m256 load_h8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load_h8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline float hsum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

// Horizontal sums of 8 rows at once: row(k, out) writes NJ vectors of partial sums for row k
// (k = 0..7); tot[j] lane k becomes the full sum of row k for query j. Pairs of rows are folded
// with hadd as soon as they exist, so few vectors are live (no per-row horizontal sum).
template <int NJ, class RowFn>
inline void fold8_rows(RowFn&& row, __m256* tot) {
  __m256 h[2][NJ];
  for (int half = 0; half < 2; ++half) {
    __m256 p[2][NJ];
    for (int pair = 0; pair < 2; ++pair) {
      __m256 r0[NJ], r1[NJ];
      row(4 * half + 2 * pair, r0);
      row(4 * half + 2 * pair + 1, r1);
      for (int j = 0; j < NJ; ++j) p[pair][j] = _mm256_hadd_ps(r0[j], r1[j]);
    }
    for (int j = 0; j < NJ; ++j) h[half][j] = _mm256_hadd_ps(p[0][j], p[1][j]);
  }
  for (int j = 0; j < NJ; ++j)
    tot[j] = _mm256_add_ps(_mm256_permute2f128_ps(h[0][j], h[1][j], 0x20), _mm256_permute2f128_ps(h[0][j], h[1][j], 0x31));
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
void with_bits(int bits, F&& f) {
  switch (bits) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    default: break;  // layouts never carry other bits
  }
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

// ---- uniform, token axis ----------------------------------------------------------------------

// s_j = sum_g S_g (q_j . code)_g + Z_g qsum_j[g], for NJ queries.
template <int BITS, int NJ>
void scores_token_tile(const KvBlockLayout& L, const uint8_t* blk, const float* q, size_t ldq, int t0, int n, float* s,
                       size_t lds) {
  const int G = L.group, d = L.head_dim, ng = d / G;
  float qsum[NJ][kMaxFoldDim / 8];
  for (int j = 0; j < NJ; ++j) {
    for (int g = 0; g < ng; ++g) {
      __m256 a = _mm256_setzero_ps();
      for (int c = g * G; c < (g + 1) * G; c += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(q + j * ldq + c));
      qsum[j][g] = hsum(a);
    }
  }
  int i = 0;
  if (ng == 1) {  // one group per row: 8 rows at a time, params of 8 consecutive rows in one load
    for (; i + 8 <= n; i += 8) {
      __m256 tot[NJ];
      fold8_rows<NJ>([&](int k, __m256* out) {
        const uint8_t* codes = blk + L.codes_offset + (size_t)(t0 + i + k) * L.row_bytes;
        for (int j = 0; j < NJ; ++j) out[j] = _mm256_setzero_ps();
        for (int c = 0; c < d; c += 8) {
          const __m256 v = decode8<BITS>(codes + (size_t)c * BITS / 8);
          for (int j = 0; j < NJ; ++j) out[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * ldq + c), v, out[j]);
        }
      }, tot);
      const __m256 S = scales8_at(L, blk, (size_t)(t0 + i));
      const __m256 Z = load_h8(blk + L.zeros_offset + 2 * (size_t)(t0 + i));
      for (int j = 0; j < NJ; ++j)
        _mm256_storeu_ps(s + j * lds + i, _mm256_fmadd_ps(S, tot[j], _mm256_mul_ps(Z, _mm256_set1_ps(qsum[j][0]))));
    }
  }
  for (; i < n; ++i) {
    const uint8_t* codes = blk + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    const size_t p0 = (size_t)(t0 + i) * ng;
    float r[NJ] = {};
    for (int g = 0; g < ng; ++g) {
      __m256 a[NJ];
      for (int j = 0; j < NJ; ++j) a[j] = _mm256_setzero_ps();
      for (int c = g * G; c < (g + 1) * G; c += 8) {
        const __m256 v = decode8<BITS>(codes + (size_t)c * BITS / 8);
        for (int j = 0; j < NJ; ++j) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * ldq + c), v, a[j]);
      }
      const float S = scale_at(L, blk, p0 + g), Z = half_at(blk, L.zeros_offset, p0 + g);
      for (int j = 0; j < NJ; ++j) r[j] += S * hsum(a[j]) + Z * qsum[j][g];
    }
    for (int j = 0; j < NJ; ++j) s[j * lds + i] = r[j];
  }
}

// acc_j += sum_i (w_ji S_i) code_i + sum_i w_ji Z_i, one group of channels at a time; the
// accumulators of an 8-channel run stay in registers over all rows.
template <int BITS, int NJ>
void accumulate_token_tile(const KvBlockLayout& L, const uint8_t* blk, const float* w, size_t ldw, int t0, int n,
                           float* acc, size_t ldacc) {
  const int G = L.group, d = L.head_dim, ng = d / G;
  alignas(32) float a[NJ][kMaxKernelRows];
  for (int g = 0; g < ng; ++g) {
    float bz[NJ] = {};
    for (int i = 0; i < n; ++i) {
      const size_t pi = (size_t)(t0 + i) * ng + g;
      const float S = scale_at(L, blk, pi), Z = half_at(blk, L.zeros_offset, pi);
      for (int j = 0; j < NJ; ++j) {
        a[j][i] = w[j * ldw + i] * S;
        bz[j] += w[j * ldw + i] * Z;
      }
    }
    for (int c = g * G; c < (g + 1) * G; c += 8) {
      __m256 o[NJ];
      for (int j = 0; j < NJ; ++j) o[j] = _mm256_loadu_ps(acc + j * ldacc + c);
      const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes + (size_t)c * BITS / 8;
      for (int i = 0; i < n; ++i, codes += L.row_bytes) {
        const __m256 v = decode8<BITS>(codes);
        for (int j = 0; j < NJ; ++j) o[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&a[j][i]), v, o[j]);
      }
      for (int j = 0; j < NJ; ++j) _mm256_storeu_ps(acc + j * ldacc + c, _mm256_add_ps(o[j], _mm256_set1_ps(bz[j])));
    }
  }
}

// The same for one group per row (group == head_dim, the default layout) at bits 2, 4, 8 and 16:
// the weights (w_ji S_i) are formed once per row, and one 32-bit broadcast decodes 16 codes (2-bit)
// or 8 codes (4-bit), a zero-extending load 8 codes (8, 16-bit); two 8-channel runs are accumulated
// per pass over the rows, so 2 x NJ accumulators stay in registers.
template <int BITS, int NJ>
void accumulate_row_group(const KvBlockLayout& L, const uint8_t* blk, const float* w, size_t ldw, int t0, int n,
                          float* acc, size_t ldacc) {
  const int d = L.head_dim;
  alignas(32) float a[NJ][kMaxKernelRows];
  float bz[NJ] = {};
  int i8 = 0;
  {  // one group per row: the params of rows i .. i + 7 are 8 consecutive halves
    __m256 bzv[NJ];
    for (int j = 0; j < NJ; ++j) bzv[j] = _mm256_setzero_ps();
    for (; i8 + 8 <= n; i8 += 8) {
      const __m256 S = scales8_at(L, blk, (size_t)(t0 + i8));
      const __m256 Z = load_h8(blk + L.zeros_offset + 2 * (size_t)(t0 + i8));
      for (int j = 0; j < NJ; ++j) {
        const __m256 wj = _mm256_loadu_ps(w + j * ldw + i8);
        _mm256_store_ps(&a[j][i8], _mm256_mul_ps(wj, S));
        bzv[j] = _mm256_fmadd_ps(wj, Z, bzv[j]);
      }
    }
    for (int j = 0; j < NJ; ++j) bz[j] = hsum(bzv[j]);
  }
  for (int i = i8; i < n; ++i) {
    const float S = scale_at(L, blk, (size_t)(t0 + i)), Z = half_at(blk, L.zeros_offset, (size_t)(t0 + i));
    for (int j = 0; j < NJ; ++j) {
      a[j][i] = w[j * ldw + i] * S;
      bz[j] += w[j * ldw + i] * Z;
    }
  }
  const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
  // Lane shifts of codes 0..7 and 8..15 of a 32-bit word (2-bit) / of codes 0..7 (4-bit).
  const __m256i sh_lo = lane_shifts8<BITS>();
  const __m256i sh_hi = _mm256_add_epi32(sh_lo, _mm256_set1_epi32(8 * BITS));
  for (int c = 0; c < d; c += 16) {
    __m256 o0[NJ], o1[NJ];
    for (int j = 0; j < NJ; ++j) {
      o0[j] = _mm256_loadu_ps(acc + j * ldacc + c);
      o1[j] = _mm256_loadu_ps(acc + j * ldacc + c + 8);
    }
    const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes + (size_t)c * BITS / 8;
    auto decode16 = [&](const uint8_t* p, __m256& v0, __m256& v1) {
      if constexpr (BITS == 16) {
        v0 = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
        v1 = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
      } else if constexpr (BITS == 8) {
        v0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
        v1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))));
      } else if constexpr (BITS == 2) {
        int32_t word;
        std::memcpy(&word, p, 4);  // codes c .. c + 15
        const __m256i wv = _mm256_set1_epi32(word);
        v0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(wv, sh_lo), mask));
        v1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(wv, sh_hi), mask));
      } else {
        int32_t w0, w1;
        std::memcpy(&w0, p, 4);      // codes c .. c + 7
        std::memcpy(&w1, p + 4, 4);  // codes c + 8 .. c + 15
        v0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w0), sh_lo), mask));
        v1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w1), sh_lo), mask));
      }
    };
    // Two rows per step: their products are summed first (mul + fma) and then added to the
    // accumulator, so each accumulator's dependency chain grows by one add per two rows instead
    // of one FMA per row (the loop would otherwise wait on FMA latency).
    int i = 0;
    for (; i + 2 <= n; i += 2, codes += 2 * L.row_bytes) {
      __m256 a0, a1, b0, b1;
      decode16(codes, a0, a1);
      decode16(codes + L.row_bytes, b0, b1);
      for (int j = 0; j < NJ; ++j) {
        const __m256 wa = _mm256_broadcast_ss(&a[j][i]), wb = _mm256_broadcast_ss(&a[j][i + 1]);
        o0[j] = _mm256_add_ps(o0[j], _mm256_fmadd_ps(wb, b0, _mm256_mul_ps(wa, a0)));
        o1[j] = _mm256_add_ps(o1[j], _mm256_fmadd_ps(wb, b1, _mm256_mul_ps(wa, a1)));
      }
    }
    for (; i < n; ++i, codes += L.row_bytes) {
      __m256 v0, v1;
      decode16(codes, v0, v1);
      for (int j = 0; j < NJ; ++j) {
        const __m256 aj = _mm256_broadcast_ss(&a[j][i]);
        o0[j] = _mm256_fmadd_ps(aj, v0, o0[j]);
        o1[j] = _mm256_fmadd_ps(aj, v1, o1[j]);
      }
    }
    for (int j = 0; j < NJ; ++j) {
      _mm256_storeu_ps(acc + j * ldacc + c, _mm256_add_ps(o0[j], _mm256_set1_ps(bz[j])));
      _mm256_storeu_ps(acc + j * ldacc + c + 8, _mm256_add_ps(o1[j], _mm256_set1_ps(bz[j])));
    }
  }
}

// ---- uniform, channel axis (KIVI keys) ---------------------------------------------------------

// Per token group: q'_j = q_j * S (elementwise), k_j = q_j . Z; then s_j = q'_j . code + k_j.
template <int BITS, int NJ>
void scores_channel_tile(const KvBlockLayout& L, const uint8_t* blk, const float* q, size_t ldq, int t0, int n, float* s,
                         size_t lds) {
  const int G = L.group, d = L.head_dim;
  alignas(32) float qf[NJ][kMaxFoldDim];
  for (int i = 0; i < n;) {
    const int tg = (t0 + i) / G;
    const int end = std::min(n, (tg + 1) * G - t0);
    const size_t p0 = (size_t)tg * d;
    float k[NJ];
    for (int j = 0; j < NJ; ++j) {
      __m256 kz = _mm256_setzero_ps();
      for (int c = 0; c < d; c += 8) {
        const __m256 qq = _mm256_loadu_ps(q + j * ldq + c);
        _mm256_store_ps(&qf[j][c], _mm256_mul_ps(qq, scales8_at(L, blk, p0 + c)));
        kz = _mm256_fmadd_ps(qq, load_h8(blk + L.zeros_offset + 2 * (p0 + c)), kz);
      }
      k[j] = hsum(kz);
    }
    for (; i < end; ++i) {
      const uint8_t* codes = blk + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
      __m256 a[NJ];
      for (int j = 0; j < NJ; ++j) a[j] = _mm256_setzero_ps();
      for (int c = 0; c < d; c += 8) {
        const __m256 v = decode8<BITS>(codes + (size_t)c * BITS / 8);
        for (int j = 0; j < NJ; ++j) a[j] = _mm256_fmadd_ps(_mm256_load_ps(&qf[j][c]), v, a[j]);
      }
      for (int j = 0; j < NJ; ++j) s[j * lds + i] = hsum(a[j]) + k[j];
    }
  }
}

bool token_fast(const KvBlockLayout& L) {
  return L.codec == Codec::uniform && L.axis == GroupAxis::token && L.group % 8 == 0 && L.head_dim / L.group <= kMaxFoldDim / 8;
}
bool channel_fast(const KvBlockLayout& L) {
  return L.codec == Codec::uniform && L.axis == GroupAxis::channel && L.head_dim <= kMaxFoldDim;
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

// Products x_k (S_k m), k < n, with the block's scales from parameter index p0 on (consecutive:
// a channel-axis token group's channels, or one-group-per-row tokens), quantized to int8 by the
// Q8Queries rule into q8 (zero-padded to a multiple of 32); returns the step, *z = sum_k x_k Z_k.
// The same fp32 operations in the same order as fold_channel_query / quantize_weights_q8 followed
// by quantize_q8_row, so the int8 values and the step are bit for bit _ref's; z is summed in another
// order (fp32 rounding only).
inline float fold_params_q8(const KvBlockLayout& L, const uint8_t* blk, size_t p0, const float* x, int n, int8_t* q8,
                            float* z) {
  static_assert(kMaxKernelRows >= kMaxQ8Dim, "one scratch size serves both callers");
  alignas(32) float f[kMaxKernelRows + 32];
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax = _mm256_setzero_ps(), zs = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    const __m256 fv = _mm256_mul_ps(xv, scales8_at(L, blk, p0 + k));
    _mm256_store_ps(f + k, fv);
    amax = _mm256_max_ps(amax, _mm256_and_ps(fv, abs_mask));
    zs = _mm256_fmadd_ps(xv, load_h8(blk + L.zeros_offset + 2 * (p0 + k)), zs);
  }
  alignas(32) float m8[8];
  _mm256_store_ps(m8, amax);
  float am = 0.0f, zsum = hsum(zs);
  for (float v : m8) am = std::max(am, v);
  for (; k < n; ++k) {
    f[k] = x[k] * scale_at(L, blk, p0 + k);
    am = std::max(am, std::abs(f[k]));
    zsum += x[k] * half_at(blk, L.zeros_offset, p0 + k);
  }
  const int padded = (n + 31) / 32 * 32;
  for (; k < padded; ++k) f[k] = 0.0f;
  const float step = am / 127.0f;
  const __m256 inv = _mm256_set1_ps(step > 0 ? 1.0f / step : 0.0f);
  for (k = 0; k < padded; k += 32) {
    __m256i v[4];
    for (int u = 0; u < 4; ++u) v[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(f + k + 8 * u), inv));  // ties to even
    const __m256i b8 = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q8 + k), _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  *z = zsum;
  return step;
}

// Channel axis (KIVI keys): per token group, each query's folded int8 copy, then
// s = qs'_g (q8' . code) + sum_c q_c Z_gc.
template <int BITS, int NJ, int CH>
void scores_q8_channel(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int j0, int t0, int n,
                       float* s, size_t lds) {
  const int d = L.head_dim;
  float* sj0 = s + (size_t)j0 * lds;
  alignas(32) int8_t q8[kMaxQ8Dim + 32];
  for (int i = 0; i < n;) {
    const int tg = (t0 + i) / L.group, end = std::min(n, (tg + 1) * L.group - t0);
    Q8Tile<BITS, NJ, CH> T;
    float qs[NJ], zt[NJ];
    for (int j = 0; j < NJ; ++j) {
      qs[j] = fold_params_q8(L, blk, (size_t)tg * d, q.f + (size_t)(j0 + j) * q.ldf, d, q8, &zt[j]);
      T.set_query(j, q8, d);
    }
    T.run(blk + L.codes_offset + (size_t)(t0 + i) * L.row_bytes, L.row_bytes, end - i,
          [&](int k, const __m256i* tot) {
            for (int j = 0; j < NJ; ++j)
              _mm256_storeu_ps(sj0 + j * lds + i + k, _mm256_fmadd_ps(_mm256_set1_ps(qs[j]), _mm256_cvtepi32_ps(tot[j]),
                                                                      _mm256_set1_ps(zt[j])));
          },
          [&](int k, const int32_t* dot) {
            for (int j = 0; j < NJ; ++j) sj0[j * lds + i + k] = qs[j] * (float)dot[j] + zt[j];
          });
    i = end;
  }
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
template <int BITS>
inline void load_code_pairs(const uint8_t* r0, const uint8_t* r1, int c, __m256i* p) {
  if constexpr (BITS == 4) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + 32 * c));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + 32 * c));
    const __m256i lo = _mm256_unpacklo_epi8(x, y), hi = _mm256_unpackhi_epi8(x, y);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    p[0] = _mm256_and_si256(lo, m4);
    p[1] = _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4);
    p[2] = _mm256_and_si256(hi, m4);
    p[3] = _mm256_and_si256(_mm256_srli_epi16(hi, 4), m4);
  } else {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 16 * c));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + 16 * c));
    const __m256i v = _mm256_set_m128i(_mm_unpackhi_epi8(x, y), _mm_unpacklo_epi8(x, y));
    const __m256i m2 = _mm256_set1_epi8(0x03);
    p[0] = _mm256_and_si256(v, m2);
    p[1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), m2);
    p[2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m2);
    p[3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), m2);
  }
}

// 64 floats of one chunk from slot order (f[k] = slots 8k .. 8k + 7) to channel order (o[k] =
// channels 8k .. 8k + 7), by the maps of load_code_pairs.
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

template <int BITS, int NJ>
void accumulate_q8(const KvBlockLayout& L, const uint8_t* blk, const float* w, size_t ldw, int t0, int n, float* acc,
                   size_t ldacc) {
  constexpr int kPairsPerWiden = BITS == 4 ? 8 : 32;
  const int d = L.head_dim, chunks = d / 64;
  alignas(32) int8_t w8[NJ][kMaxKernelRows + 32];
  float step[NJ], bz[NJ];
  for (int j = 0; j < NJ; ++j) step[j] = fold_params_q8(L, blk, (size_t)t0, w + j * ldw, n, w8[j], &bz[j]);
  // Each query's weight pairs broadcast once per call, so the inner loop reads them as memory
  // operands and its 4 x NJ s16 accumulators keep the registers.
  alignas(32) __m256i wpair[NJ][kMaxKernelRows / 2];
  const int pairs = (n + 1) / 2;
  for (int j = 0; j < NJ; ++j) {
    if (n % 2) w8[j][n] = 0;  // odd tail: row n - 1 pairs with itself at weight 0
    for (int i = 0; i < pairs; ++i) {
      int16_t wp;
      std::memcpy(&wp, &w8[j][2 * i], 2);
      wpair[j][i] = _mm256_set1_epi16(wp);
    }
  }
  alignas(32) int32_t a32[NJ][kMaxQ8Dim];  // slot order
  for (int j = 0; j < NJ; ++j) std::fill(a32[j], a32[j] + d, 0);
  const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes;
  // Two passes per chunk, vectors m = 0, 1 and then 2, 3: 2 x NJ s16 accumulators stay in
  // registers (4 x NJ = 12 did not fit in 16 and were spilled to the stack every row pair); the
  // second pass decodes the rows again, which costs less than the spills did.
  for (int c = 0; c < chunks; ++c) {
    for (int mh = 0; mh < 4; mh += 2) {
      for (int i0 = 0; i0 < n; i0 += 2 * kPairsPerWiden) {
        const int i1 = std::min(n, i0 + 2 * kPairsPerWiden);
        __m256i s16[NJ][2];
        for (int j = 0; j < NJ; ++j) s16[j][0] = s16[j][1] = _mm256_setzero_si256();
        for (int i = i0; i < i1; i += 2) {
          const uint8_t* r0 = codes + (size_t)i * L.row_bytes;
          const uint8_t* r1 = i + 1 < n ? r0 + L.row_bytes : r0;
          __m256i p[4];
          load_code_pairs<BITS>(r0, r1, c, p);  // the other half's vectors are dead code
          for (int m = 0; m < 2; ++m)
            for (int j = 0; j < NJ; ++j)
              s16[j][m] = _mm256_add_epi16(s16[j][m], _mm256_maddubs_epi16(p[mh + m], wpair[j][i / 2]));
        }
        for (int j = 0; j < NJ; ++j) {
          for (int m = 0; m < 2; ++m) {
            int32_t* lo = &a32[j][64 * c + 16 * (mh + m)];
            const __m256i wl = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(s16[j][m]));
            const __m256i wh = _mm256_cvtepi16_epi32(_mm256_extracti128_si256(s16[j][m], 1));
            _mm256_store_si256(reinterpret_cast<__m256i*>(lo), _mm256_add_epi32(_mm256_load_si256(reinterpret_cast<__m256i*>(lo)), wl));
            _mm256_store_si256(reinterpret_cast<__m256i*>(lo + 8), _mm256_add_epi32(_mm256_load_si256(reinterpret_cast<__m256i*>(lo + 8)), wh));
          }
        }
      }
    }
  }
  for (int j = 0; j < NJ; ++j) {
    const __m256 sv = _mm256_set1_ps(step[j]), zv = _mm256_set1_ps(bz[j]);
    for (int c = 0; c < chunks; ++c) {
      __m256 f[8], o[8];
      for (int k = 0; k < 8; ++k)
        f[k] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(&a32[j][64 * c + 8 * k]))), zv);
      unpermute_slots<BITS>(f, o);
      float* out = acc + j * ldacc + 64 * c;
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + 8 * k, _mm256_add_ps(_mm256_loadu_ps(out + 8 * k), o[k]));
    }
  }
}

// ---- exp -----------------------------------------------------------------------------------------

// exp(x) for x <= 0 (Cephes' expf: range reduction by ln 2 in two parts, degree-6 polynomial,
// relative error about 2e-7); x < -87 gives 0 (also for -inf).
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 zero_mask = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), zero_mask);
}

}  // namespace

void packed_scores_avx2(const PackedBlockView& b, const float* q, size_t ldq, int nq, int t0, int n, float* s,
                        size_t lds) {
  const KvBlockLayout& L = *b.layout;
  const bool tok = token_fast(L), chan = channel_fast(L);
  if (!tok && !chan) return packed_scores_ref(b, q, ldq, nq, t0, n, s, lds);
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      with_bits(L.bits, [&](auto B) {
        constexpr int bits = decltype(B)::value, nj = decltype(NJ)::value;
        if (tok) {
          scores_token_tile<bits, nj>(L, b.data, q + j0 * ldq, ldq, t0, n, s + j0 * lds, lds);
        } else {
          scores_channel_tile<bits, nj>(L, b.data, q + j0 * ldq, ldq, t0, n, s + j0 * lds, lds);
        }
      });
    });
  }
}

void packed_accumulate_avx2(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                            size_t ldacc) {
  const KvBlockLayout& L = *b.layout;
  if (!token_fast(L) || n > kMaxKernelRows) return packed_accumulate_ref(b, w, ldw, nq, t0, n, acc, ldacc);
  if (L.group == L.head_dim && L.head_dim % 16 == 0 && L.bits != 1 && L.bits != 3) {
    for (int j0 = 0; j0 < nq; j0 += kTile) {
      with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
        with_bits(L.bits, [&](auto B) {
          constexpr int bits = decltype(B)::value;
          if constexpr (kByteFriendly<bits>)
            accumulate_row_group<bits, decltype(NJ)::value>(L, b.data, w + j0 * ldw, ldw, t0, n, acc + j0 * ldacc, ldacc);
        });
      });
    }
    return;
  }
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      with_bits(L.bits, [&](auto B) {
        accumulate_token_tile<decltype(B)::value, decltype(NJ)::value>(L, b.data, w + j0 * ldw, ldw, t0, n,
                                                                       acc + j0 * ldacc, ldacc);
      });
    });
  }
}

void f16_scores_avx2(const uint16_t* x, size_t stride, int d, const float* q, size_t ldq, int nq, int n, float* s,
                     size_t lds) {
  if (d % 8 != 0) return f16_scores_ref(x, stride, d, q, ldq, nq, n, s, lds);
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      constexpr int NJc = decltype(NJ)::value;
      const float* qt = q + j0 * ldq;
      int i = 0;
      for (; i + 8 <= n; i += 8) {
        __m256 tot[NJc];
        fold8_rows<NJc>([&](int k, __m256* out) {
          const uint16_t* row = x + (size_t)(i + k) * stride;
          for (int j = 0; j < NJc; ++j) out[j] = _mm256_setzero_ps();
          for (int c = 0; c < d; c += 8) {
            const __m256 v = load_h8(row + c);
            for (int j = 0; j < NJc; ++j) out[j] = _mm256_fmadd_ps(_mm256_loadu_ps(qt + j * ldq + c), v, out[j]);
          }
        }, tot);
        for (int j = 0; j < NJc; ++j) _mm256_storeu_ps(s + (j0 + j) * lds + i, tot[j]);
      }
      for (; i < n; ++i) {
        const uint16_t* row = x + (size_t)i * stride;
        __m256 a[NJc];
        for (int j = 0; j < NJc; ++j) a[j] = _mm256_setzero_ps();
        for (int c = 0; c < d; c += 8) {
          const __m256 v = load_h8(row + c);
          for (int j = 0; j < NJc; ++j) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(qt + j * ldq + c), v, a[j]);
        }
        for (int j = 0; j < NJc; ++j) s[(j0 + j) * lds + i] = hsum(a[j]);
      }
    });
  }
}

void f16_accumulate_avx2(const uint16_t* x, size_t stride, int d, const float* w, size_t ldw, int nq, int n, float* acc,
                         size_t ldacc) {
  if (d % 8 != 0) return f16_accumulate_ref(x, stride, d, w, ldw, nq, n, acc, ldacc);
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      constexpr int NJc = decltype(NJ)::value;
      const float* wt = w + j0 * ldw;
      float* at = acc + j0 * ldacc;
      for (int c = 0; c < d; c += 8) {
        __m256 o[NJc];
        for (int j = 0; j < NJc; ++j) o[j] = _mm256_loadu_ps(at + j * ldacc + c);
        for (int i = 0; i < n; ++i) {
          const __m256 v = load_h8(x + (size_t)i * stride + c);
          for (int j = 0; j < NJc; ++j) o[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(wt + j * ldw + i), v, o[j]);
        }
        for (int j = 0; j < NJc; ++j) _mm256_storeu_ps(at + j * ldacc + c, o[j]);
      }
    });
  }
}

void packed_scores_q8_avx2(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds) {
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

void packed_accumulate_q8_avx2(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                               size_t ldacc) {
  const KvBlockLayout& L = *b.layout;
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      constexpr int nj = decltype(NJ)::value;
      if (L.bits == 4) {
        accumulate_q8<4, nj>(L, b.data, w + j0 * ldw, ldw, t0, n, acc + j0 * ldacc, ldacc);
      } else {
        accumulate_q8<2, nj>(L, b.data, w + j0 * ldw, ldw, t0, n, acc + j0 * ldacc, ldacc);
      }
    });
  }
}

float max_value_avx2(const float* s, int n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + i));
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
  float r = _mm_cvtss_f32(a);
  for (; i < n; ++i) r = std::max(r, s[i]);
  return r;
}

float exp_sum_avx2(float* s, int n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {  // tail through the same polynomial, padded with -inf (exp -> 0)
    alignas(32) float t[8];
    for (int k = 0; k < 8; ++k) t[k] = i + k < n ? s[i + k] : -INFINITY;
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(t), mv));
    _mm256_store_ps(t, e);
    sum = _mm256_add_ps(sum, e);
    for (int k = 0; i + k < n; ++k) s[i + k] = t[k];
  }
  return hsum(sum);
}

}  // namespace mpkv

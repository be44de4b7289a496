// AVX2 + FMA + F16C variants of the paged attention kernels (compiled with those flags only here).
// Fast paths: uniform token-axis blocks (group % 8 == 0) at bits 1, 2, 3, 4, 8, 16; channel-axis
// key scores (KIVI, head_dim <= 512); fp16 rows (d % 8 == 0); exp_sum. Else the _ref kernel.
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
      const __m256 S =
          _mm256_mul_ps(load_h8(blk + L.scales_offset + 2 * (size_t)(t0 + i)), _mm256_set1_ps(L.scale_mult));
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
      const float S = half_at(blk, L.scales_offset, p0 + g) * L.scale_mult, Z = half_at(blk, L.zeros_offset, p0 + g);
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
      const float S = half_at(blk, L.scales_offset, pi) * L.scale_mult, Z = half_at(blk, L.zeros_offset, pi);
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

// The same for one group per row (group == head_dim, the default layout) at bits 2 and 4, the
// formats of the low-bit pages: the weights (w_ji S_i) are formed once per row, and one 32-bit
// broadcast decodes 16 codes (2-bit) or 8 codes (4-bit); two 8-channel runs are accumulated per
// pass over the rows, so 2 x NJ accumulators stay in registers.
template <int BITS, int NJ>
void accumulate_row_group(const KvBlockLayout& L, const uint8_t* blk, const float* w, size_t ldw, int t0, int n,
                          float* acc, size_t ldacc) {
  const int d = L.head_dim;
  alignas(32) float a[NJ][kMaxKernelRows];
  float bz[NJ] = {};
  for (int i = 0; i < n; ++i) {
    const float S = half_at(blk, L.scales_offset, (size_t)(t0 + i)) * L.scale_mult;
    const float Z = half_at(blk, L.zeros_offset, (size_t)(t0 + i));
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
      if constexpr (BITS == 2) {
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
        const __m256 sc = _mm256_mul_ps(load_h8(blk + L.scales_offset + 2 * (p0 + c)), _mm256_set1_ps(L.scale_mult));
        _mm256_store_ps(&qf[j][c], _mm256_mul_ps(qq, sc));
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

// s32 lanes whose sum is q8_j . code of one row: per 64 channels the codes are unpacked into two
// vectors of byte planes (A, B) matching perm4 / perm2, multiplied by the query bytes with
// maddubs (u8 x s8 pairs -> s16: at most 2 x 15 x 127, no saturation) and widened with madd.
template <int BITS>
struct RowPlanes {
  __m256i a[kMaxFoldDim / 64], b[kMaxFoldDim / 64];
  void load(const uint8_t* codes, int chunks) {
    for (int c = 0; c < chunks; ++c) {
      if constexpr (BITS == 4) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * c));
        a[c] = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
        b[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
      } else {
        const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16 * c)));
        // 64-bit lanes shifted by 0 / 2 (A: fields 0 and 1) and 4 / 6 (B: fields 2 and 3); the bits
        // shifted in from the next byte are masked off.
        a[c] = _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(2, 2, 0, 0)), _mm256_set1_epi8(0x03));
        b[c] = _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(6, 6, 4, 4)), _mm256_set1_epi8(0x03));
      }
    }
  }
  __m256i dot(const int8_t* q, int chunks) const {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < chunks; ++c) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * c));
      const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * c + 32));
      const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(a[c], qa), _mm256_maddubs_epi16(b[c], qb));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    return acc;
  }
};

inline int32_t hsum_epi32(__m256i v) {
  __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4E));
  a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xB1));
  return _mm_cvtsi128_si32(a);
}

// [sum(r0), ..., sum(r7)] of eight vectors of 8 s32.
inline __m256i sum8x8(const __m256i* r) {
  const __m256i h0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(r[0], r[1]), _mm256_hadd_epi32(r[2], r[3]));
  const __m256i h4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(r[4], r[5]), _mm256_hadd_epi32(r[6], r[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20), _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

constexpr int kMaxQ8Queries = 32;

// General q8 scores (any nq <= kMaxQ8Queries, head_dim <= kMaxFoldDim): eight rows' s32 vectors
// per query are kept and reduced together.
template <int BITS>
void scores_q8(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int t0, int n, float* s, size_t lds) {
  const int d = L.head_dim, chunks = d / 64;
  const int8_t* qp = BITS == 4 ? q.perm4 : q.perm2;
  const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes;
  RowPlanes<BITS> rp;
  int i = 0;
  alignas(32) __m256i r[kMaxQ8Queries][8];
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      rp.load(codes + (size_t)(i + k) * L.row_bytes, chunks);
      for (int j = 0; j < q.nq; ++j) r[j][k] = rp.dot(qp + (size_t)j * d, chunks);
    }
    // One group per row: the params of rows t0 + i .. + 7 are 8 consecutive halves.
    const __m256 S = _mm256_mul_ps(load_h8(blk + L.scales_offset + 2 * (size_t)(t0 + i)), _mm256_set1_ps(L.scale_mult));
    const __m256 Z = load_h8(blk + L.zeros_offset + 2 * (size_t)(t0 + i));
    for (int j = 0; j < q.nq; ++j) {
      const __m256 dotf = _mm256_mul_ps(_mm256_cvtepi32_ps(sum8x8(r[j])), _mm256_set1_ps(q.scale[j]));
      _mm256_storeu_ps(s + j * lds + i, _mm256_fmadd_ps(S, dotf, _mm256_mul_ps(Z, _mm256_set1_ps(q.sum[j]))));
    }
  }
  for (; i < n; ++i) {
    rp.load(codes + (size_t)i * L.row_bytes, chunks);
    const float S = half_at(blk, L.scales_offset, (size_t)(t0 + i)) * L.scale_mult;
    const float Z = half_at(blk, L.zeros_offset, (size_t)(t0 + i));
    for (int j = 0; j < q.nq; ++j)
      s[j * lds + i] = S * (q.scale[j] * (float)hsum_epi32(rp.dot(qp + (size_t)j * d, chunks))) + Z * q.sum[j];
  }
}

// head_dim 64 and NJ <= 4 queries (the decode case): the query bytes stay in registers and each
// pair of rows is folded with hadd as soon as it is computed, so no row vector is stored.
template <int BITS, int NJ>
void scores_q8_d64(const KvBlockLayout& L, const uint8_t* blk, const Q8Queries& q, int j0, int t0, int n, float* s,
                   size_t lds) {
  const int8_t* qp = (BITS == 4 ? q.perm4 : q.perm2) + (size_t)j0 * 64;
  const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i qa[NJ], qb[NJ];
  for (int j = 0; j < NJ; ++j) {
    qa[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qp + 64 * j));
    qb[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qp + 64 * j + 32));
  }
  auto row_dot = [&](const uint8_t* c, __m256i* out) {
    RowPlanes<BITS> rp;
    rp.load(c, 1);
    for (int j = 0; j < NJ; ++j)
      out[j] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(rp.a[0], qa[j]), _mm256_maddubs_epi16(rp.b[0], qb[j])), ones);
  };
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i h[2][NJ];
    for (int half = 0; half < 2; ++half) {
      __m256i p[2][NJ];
      for (int pair = 0; pair < 2; ++pair) {
        __m256i r0[NJ], r1[NJ];
        const uint8_t* c = codes + (size_t)(i + 4 * half + 2 * pair) * L.row_bytes;
        row_dot(c, r0);
        row_dot(c + L.row_bytes, r1);
        for (int j = 0; j < NJ; ++j) p[pair][j] = _mm256_hadd_epi32(r0[j], r1[j]);
      }
      for (int j = 0; j < NJ; ++j) h[half][j] = _mm256_hadd_epi32(p[0][j], p[1][j]);
    }
    const __m256 S = _mm256_mul_ps(load_h8(blk + L.scales_offset + 2 * (size_t)(t0 + i)), _mm256_set1_ps(L.scale_mult));
    const __m256 Z = load_h8(blk + L.zeros_offset + 2 * (size_t)(t0 + i));
    for (int j = 0; j < NJ; ++j) {
      const __m256i tot = _mm256_add_epi32(_mm256_permute2x128_si256(h[0][j], h[1][j], 0x20),
                                           _mm256_permute2x128_si256(h[0][j], h[1][j], 0x31));
      const __m256 dotf = _mm256_mul_ps(_mm256_cvtepi32_ps(tot), _mm256_set1_ps(q.scale[j0 + j]));
      _mm256_storeu_ps(s + (j0 + j) * lds + i, _mm256_fmadd_ps(S, dotf, _mm256_mul_ps(Z, _mm256_set1_ps(q.sum[j0 + j]))));
    }
  }
  for (; i < n; ++i) {
    __m256i r[NJ];
    row_dot(codes + (size_t)i * L.row_bytes, r);
    const float S = half_at(blk, L.scales_offset, (size_t)(t0 + i)) * L.scale_mult;
    const float Z = half_at(blk, L.zeros_offset, (size_t)(t0 + i));
    for (int j = 0; j < NJ; ++j)
      s[(j0 + j) * lds + i] = S * (q.scale[j0 + j] * (float)hsum_epi32(r[j])) + Z * q.sum[j0 + j];
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
  if (L.group == L.head_dim && L.head_dim % 16 == 0 && (L.bits == 2 || L.bits == 4)) {
    for (int j0 = 0; j0 < nq; j0 += kTile) {
      with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
        if (L.bits == 4) {
          accumulate_row_group<4, decltype(NJ)::value>(L, b.data, w + j0 * ldw, ldw, t0, n, acc + j0 * ldacc, ldacc);
        } else {
          accumulate_row_group<2, decltype(NJ)::value>(L, b.data, w + j0 * ldw, ldw, t0, n, acc + j0 * ldacc, ldacc);
        }
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
  if (L.head_dim == 64) {
    for (int j0 = 0; j0 < q.nq; j0 += kTile) {
      with_tile(std::min(kTile, q.nq - j0), [&](auto NJ) {
        if (L.bits == 4) {
          scores_q8_d64<4, decltype(NJ)::value>(L, b.data, q, j0, t0, n, s, lds);
        } else {
          scores_q8_d64<2, decltype(NJ)::value>(L, b.data, q, j0, t0, n, s, lds);
        }
      });
    }
    return;
  }
  if (q.nq > kMaxQ8Queries || L.head_dim > kMaxFoldDim) return packed_scores_q8_ref(b, q, t0, n, s, lds);
  if (L.bits == 4) return scores_q8<4>(L, b.data, q, t0, n, s, lds);
  scores_q8<2>(L, b.data, q, t0, n, s, lds);
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

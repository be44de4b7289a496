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
#include "attention/paged_attention_q8_simd.h"

namespace mpkv {
namespace {  // internal linkage: AVX2 code must never be merged with other copies

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
  scores_q8_tiles(b, q, t0, n, s, lds);
}

void packed_accumulate_q8_avx2(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                               size_t ldacc) {
  accumulate_q8_tiles<12>(b, w, ldw, nq, t0, n, acc, ldacc);
}

float max_value_avx2(const float* s, int n) {
  // Four running maxima: one chain of dependent vmaxps (4 cycles each) was the whole cost of a
  // 256-score run, ~4% of a 2-bit decode step's attention in perf (docs/results/speed.md 11g).
  // The maximum is exact, so the order does not change the result.
  __m256 m4[4];
  for (auto& v : m4) v = _mm256_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) m4[k] = _mm256_max_ps(m4[k], _mm256_loadu_ps(s + i + 8 * k));
  __m256 m = _mm256_max_ps(_mm256_max_ps(m4[0], m4[1]), _mm256_max_ps(m4[2], m4[3]));
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

// AVX-512 (F, BW, VL, DQ) variants of the paged attention kernels: the AVX2 algorithms with 16
// lanes. Fast paths: uniform token-axis blocks with group % 16 == 0 (bits 1, 2, 3, 4, 8, 16),
// fp16 rows with d % 16 == 0, exp_sum; everything else forwards to the AVX2 kernels (which this
// CPU also runs) and from there to _ref. The int8 kernels (packed_scores_q8, packed_accumulate_q8)
// are the 256-bit ones of paged_attention_q8_simd.h compiled here with AVX-512 flags: the value
// kernel keeps its 4 x NJ accumulators in the 32 registers in one pass over the rows (AVX2: two).
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports as a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "attention/paged_attention_kernels.h"
#include "attention/paged_attention_q8_simd.h"

namespace mpkv {
namespace {  // internal linkage: AVX-512 code must never be merged with other copies

constexpr int kMaxGroups = 64;

// 16 codes starting at byte p -> 16 floats. For bits 1, 2, 4 the 16 codes are one little-endian
// word of 2 * bits bytes in which no code straddles a 32-bit boundary: lane k reads dword
// (k * bits) / 32 shifted right by (k * bits) % 32. 3-bit codes decode as two 8-code words.
template <int BITS>
__m512 decode16(const uint8_t* p) {
  __m512i c;
  if constexpr (BITS == 16) {
    c = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (BITS == 8) {
    c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (BITS == 3) {
    const uint32_t w0 = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    const uint32_t w1 = (uint32_t)p[3] | (uint32_t)p[4] << 8 | (uint32_t)p[5] << 16;
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)w0)), _mm256_set1_epi32((int)w1), 1);
    const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 0, 3, 6, 9, 12, 15, 18, 21);
    c = _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(7));
  } else {
    uint64_t w = 0;
    std::memcpy(&w, p, 2 * BITS);
    alignas(64) int32_t idx[16], sh[16];
    for (int k = 0; k < 16; ++k) idx[k] = k * BITS / 32, sh[k] = k * BITS % 32;
    const __m512i words = _mm512_permutexvar_epi32(_mm512_load_si512(idx), _mm512_set1_epi64((long long)w));
    c = _mm512_and_si512(_mm512_srlv_epi32(words, _mm512_load_si512(sh)), _mm512_set1_epi32((1 << BITS) - 1));
  }
  return _mm512_cvtepi32_ps(c);
}

inline __m512 load_h16(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

template <int BITS, int NJ>
void scores_token_tile(const KvBlockLayout& L, const uint8_t* blk, const float* q, size_t ldq, int t0, int n, float* s,
                       size_t lds) {
  const int G = L.group, d = L.head_dim, ng = d / G;
  float qsum[NJ][kMaxGroups];
  for (int j = 0; j < NJ; ++j) {
    for (int g = 0; g < ng; ++g) {
      __m512 a = _mm512_setzero_ps();
      for (int c = g * G; c < (g + 1) * G; c += 16) a = _mm512_add_ps(a, _mm512_loadu_ps(q + j * ldq + c));
      qsum[j][g] = _mm512_reduce_add_ps(a);
    }
  }
  for (int i = 0; i < n; ++i) {
    const uint8_t* codes = blk + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    const size_t p0 = (size_t)(t0 + i) * ng;
    float r[NJ] = {};
    for (int g = 0; g < ng; ++g) {
      __m512 a[NJ];
      for (int j = 0; j < NJ; ++j) a[j] = _mm512_setzero_ps();
      for (int c = g * G; c < (g + 1) * G; c += 16) {
        const __m512 v = decode16<BITS>(codes + (size_t)c * BITS / 8);
        for (int j = 0; j < NJ; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q + j * ldq + c), v, a[j]);
      }
      const float S = half_at(blk, L.scales_offset, p0 + g) * L.scale_mult, Z = half_at(blk, L.zeros_offset, p0 + g);
      for (int j = 0; j < NJ; ++j) r[j] += S * _mm512_reduce_add_ps(a[j]) + Z * qsum[j][g];
    }
    for (int j = 0; j < NJ; ++j) s[j * lds + i] = r[j];
  }
}

template <int BITS, int NJ>
void accumulate_token_tile(const KvBlockLayout& L, const uint8_t* blk, const float* w, size_t ldw, int t0, int n,
                           float* acc, size_t ldacc) {
  const int G = L.group, d = L.head_dim, ng = d / G;
  alignas(64) float a[NJ][kMaxKernelRows];
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
    for (int c = g * G; c < (g + 1) * G; c += 16) {
      __m512 o[NJ];
      for (int j = 0; j < NJ; ++j) o[j] = _mm512_loadu_ps(acc + j * ldacc + c);
      const uint8_t* codes = blk + L.codes_offset + (size_t)t0 * L.row_bytes + (size_t)c * BITS / 8;
      for (int i = 0; i < n; ++i, codes += L.row_bytes) {
        const __m512 v = decode16<BITS>(codes);
        for (int j = 0; j < NJ; ++j) o[j] = _mm512_fmadd_ps(_mm512_set1_ps(a[j][i]), v, o[j]);
      }
      for (int j = 0; j < NJ; ++j) _mm512_storeu_ps(acc + j * ldacc + c, _mm512_add_ps(o[j], _mm512_set1_ps(bz[j])));
    }
  }
}

bool token_fast(const KvBlockLayout& L) {
  return L.codec == Codec::uniform && L.axis == GroupAxis::token && L.group % 16 == 0 && L.head_dim / L.group <= kMaxGroups;
}

// exp(x) for x <= 0, as exp_nonpositive in the AVX2 file (Cephes expf), 16 lanes.
inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                         _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500E-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, y, _mm512_castsi512_ps(e));
}

}  // namespace

void packed_scores_avx512(const PackedBlockView& b, const float* q, size_t ldq, int nq, int t0, int n, float* s,
                          size_t lds) {
  const KvBlockLayout& L = *b.layout;
  if (!token_fast(L)) return packed_scores_avx2(b, q, ldq, nq, t0, n, s, lds);
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      with_bits(L.bits, [&](auto B) {
        scores_token_tile<decltype(B)::value, decltype(NJ)::value>(L, b.data, q + j0 * ldq, ldq, t0, n, s + j0 * lds, lds);
      });
    });
  }
}

void packed_accumulate_avx512(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                              size_t ldacc) {
  const KvBlockLayout& L = *b.layout;
  if (!token_fast(L) || n > kMaxKernelRows) return packed_accumulate_avx2(b, w, ldw, nq, t0, n, acc, ldacc);
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      with_bits(L.bits, [&](auto B) {
        accumulate_token_tile<decltype(B)::value, decltype(NJ)::value>(L, b.data, w + j0 * ldw, ldw, t0, n,
                                                                       acc + j0 * ldacc, ldacc);
      });
    });
  }
}

void f16_scores_avx512(const uint16_t* x, size_t stride, int d, const float* q, size_t ldq, int nq, int n, float* s,
                       size_t lds) {
  if (d % 16 != 0) return f16_scores_avx2(x, stride, d, q, ldq, nq, n, s, lds);
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      constexpr int NJc = decltype(NJ)::value;
      const float* qt = q + j0 * ldq;
      for (int i = 0; i < n; ++i) {
        const uint16_t* row = x + (size_t)i * stride;
        __m512 a[NJc];
        for (int j = 0; j < NJc; ++j) a[j] = _mm512_setzero_ps();
        for (int c = 0; c < d; c += 16) {
          const __m512 v = load_h16(row + c);
          for (int j = 0; j < NJc; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(qt + j * ldq + c), v, a[j]);
        }
        for (int j = 0; j < NJc; ++j) s[(j0 + j) * lds + i] = _mm512_reduce_add_ps(a[j]);
      }
    });
  }
}

void f16_accumulate_avx512(const uint16_t* x, size_t stride, int d, const float* w, size_t ldw, int nq, int n,
                           float* acc, size_t ldacc) {
  if (d % 16 != 0) return f16_accumulate_avx2(x, stride, d, w, ldw, nq, n, acc, ldacc);
  for (int j0 = 0; j0 < nq; j0 += kTile) {
    with_tile(std::min(kTile, nq - j0), [&](auto NJ) {
      constexpr int NJc = decltype(NJ)::value;
      const float* wt = w + j0 * ldw;
      float* at = acc + j0 * ldacc;
      for (int c = 0; c < d; c += 16) {
        __m512 o[NJc];
        for (int j = 0; j < NJc; ++j) o[j] = _mm512_loadu_ps(at + j * ldacc + c);
        for (int i = 0; i < n; ++i) {
          const __m512 v = load_h16(x + (size_t)i * stride + c);
          for (int j = 0; j < NJc; ++j) o[j] = _mm512_fmadd_ps(_mm512_set1_ps(wt[j * ldw + i]), v, o[j]);
        }
        for (int j = 0; j < NJc; ++j) _mm512_storeu_ps(at + j * ldacc + c, o[j]);
      }
    });
  }
}

void packed_scores_q8_avx512(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds) {
  scores_q8_tiles(b, q, t0, n, s, lds);
}

void packed_accumulate_q8_avx512(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n,
                                 float* acc, size_t ldacc) {
  accumulate_q8_tiles<32>(b, w, ldw, nq, t0, n, acc, ldacc);
}

float exp_sum_avx512(float* s, int n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
    const __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + i);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(x, mv));
    _mm512_mask_storeu_ps(s + i, k, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

}  // namespace mpkv

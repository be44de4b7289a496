// AVX-512 (F, BW, VL, DQ) + FMA + F16C variants of the KV block kernels; compiled with those flags
// only here. Same fast paths as quant_kernels_avx2.cpp with 16 codes per step (group % 16 == 0);
// anything else forwards to the _ref kernel.
//
// 16 consecutive codes at `bits` <= 4 are one little-endian word of 2*bits bytes; its low 8*bits
// bits hold codes 0..7 and the next 8*bits codes 8..15, each decoded by broadcast + variable shift.
// GCC 12 warns inside its own avx512fintrin.h about the undefined upper half of
// _mm512_castsi256_si512 (which _mm512_inserti64x4 then overwrites): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "quant/bits_dispatch.h"
#include "quant/equivalent_shift.h"
#include "quant/quant_kernels.h"
#include "quant/quant_options.h"
#include "quant/uniform_params.h"

namespace mpkv {
namespace {  // internal linkage: AVX-512 code must never be merged with other copies

template <int BITS>
__m512i lane_shifts16() {
  return _mm512_setr_epi32(0, BITS, 2 * BITS, 3 * BITS, 4 * BITS, 5 * BITS, 6 * BITS, 7 * BITS, 0, BITS, 2 * BITS,
                           3 * BITS, 4 * BITS, 5 * BITS, 6 * BITS, 7 * BITS);
}

// 16 codes starting at byte p -> 16 int32 lanes.
template <int BITS>
__m512i decode16(const uint8_t* p) {
  if constexpr (BITS == 16) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (BITS == 8) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    uint64_t w;
    if constexpr (BITS == 3) {  // 6 bytes: a 16-bit and a 32-bit load (a 6-byte memcpy is slow)
      uint16_t a;
      uint32_t b;
      std::memcpy(&a, p, 2);
      std::memcpy(&b, p + 2, 4);
      w = (uint64_t)a | (uint64_t)b << 16;
    } else {
      w = 0;
      std::memcpy(&w, p, 2 * BITS);
    }
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)(uint32_t)w)),
                                         _mm256_set1_epi32((int)(uint32_t)(w >> (8 * BITS))), 1);
    return _mm512_and_si512(_mm512_srlv_epi32(v, lane_shifts16<BITS>()), _mm512_set1_epi32((1 << BITS) - 1));
  }
}

uint32_t or_reduce8(__m256i s) {
  __m128i a = _mm_or_si128(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  a = _mm_or_si128(a, _mm_shuffle_epi32(a, 0x4E));
  a = _mm_or_si128(a, _mm_shuffle_epi32(a, 0xB1));
  return (uint32_t)_mm_cvtsi128_si32(a);
}

// 16 int32 codes (each < 2^BITS) -> packed at byte p.
template <int BITS>
void encode16(__m512i codes, uint8_t* p) {
  if constexpr (BITS == 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(codes));
  } else if constexpr (BITS == 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(codes));
  } else {
    const __m512i s = _mm512_sllv_epi32(codes, lane_shifts16<BITS>());
    const uint64_t w = (uint64_t)or_reduce8(_mm512_castsi512_si256(s)) |
                       ((uint64_t)or_reduce8(_mm512_extracti64x4_epi64(s, 1)) << (8 * BITS));
    if constexpr (BITS == 3) {
      const uint16_t a = (uint16_t)w;
      const uint32_t b = (uint32_t)(w >> 16);
      std::memcpy(p, &a, 2);
      std::memcpy(p + 2, &b, 4);
    } else {
      std::memcpy(p, &w, 2 * BITS);
    }
  }
}

float half_at(const uint8_t* block, size_t offset, size_t i) { return _cvtsh_ss(load_half(block, offset, i)); }

// KvBlockLayout::param_index for the token axis, restated here (see quant_kernels_avx2.cpp).
size_t token_param(const KvBlockLayout& L, int token, int channel) {
  return (size_t)token * (size_t)(L.head_dim / L.group) + (size_t)(channel / L.group);
}

bool has_fast_path(const KvBlockLayout& L) {
  return L.codec == Codec::uniform && L.axis == GroupAxis::token && L.group % 16 == 0;
}

template <int BITS>
void quantize_rows(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  const int G = L.group, d = L.head_dim;
  const __m512 qmax = _mm512_set1_ps((float)((1u << BITS) - 1u)), half = _mm512_set1_ps(0.5f);
  const __m512 zero = _mm512_setzero_ps();
  for (int i = 0; i < n; ++i) {
    const float* row = x + (size_t)i * ldx;
    uint8_t* codes = block + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    for (int g0 = 0; g0 < d; g0 += G) {
      __m512 lo = _mm512_loadu_ps(row + g0), hi = lo;
      for (int c = g0 + 16; c < g0 + G; c += 16) {
        const __m512 v = _mm512_loadu_ps(row + c);
        lo = _mm512_min_ps(lo, v);
        hi = _mm512_max_ps(hi, v);
      }
      const UniformGroupParams p = uniform_group_params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi), BITS);
      const size_t pi = token_param(L, t0 + i, g0);
      store_half(block, L.scales_offset, pi, p.scale_h);
      store_half(block, L.zeros_offset, pi, p.zero_h);
      const __m512 s = _mm512_set1_ps(p.scale), z = _mm512_set1_ps(p.zero);
      for (int c = g0; c < g0 + G; c += 16) {
        __m512 t = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(row + c), z), s);
        t = _mm512_roundscale_ps(_mm512_add_ps(t, half), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        t = _mm512_min_ps(_mm512_max_ps(t, zero), qmax);  // NaN -> 0 (max returns its 2nd operand)
        encode16<BITS>(_mm512_cvttps_epi32(t), codes + (size_t)c * BITS / 8);
      }
    }
  }
}

template <int BITS>
void dequantize_rows(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy) {
  const int G = L.group, d = L.head_dim;
  for (int i = 0; i < n; ++i) {
    const uint8_t* codes = block + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    float* out = y + (size_t)i * ldy;
    for (int g0 = 0; g0 < d; g0 += G) {
      const size_t pi = token_param(L, t0 + i, g0);
      const __m512 s = _mm512_set1_ps(half_at(block, L.scales_offset, pi) * L.scale_mult);
      const __m512 z = _mm512_set1_ps(half_at(block, L.zeros_offset, pi));
      for (int c = g0; c < g0 + G; c += 16) {
        const __m512 q = _mm512_cvtepi32_ps(decode16<BITS>(codes + (size_t)c * BITS / 8));
        _mm512_storeu_ps(out + c, _mm512_fmadd_ps(q, s, z));
      }
    }
  }
}

template <int BITS>
void dot_rows(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out) {
  const int G = L.group, d = L.head_dim, ng = d / G;
  float qsum[kMaxHeadDim / 16];
  for (int g = 0; g < ng; ++g) {
    __m512 a = _mm512_setzero_ps();
    for (int c = g * G; c < (g + 1) * G; c += 16) a = _mm512_add_ps(a, _mm512_loadu_ps(q + c));
    qsum[g] = _mm512_reduce_add_ps(a);
  }
  for (int i = 0; i < n; ++i) {
    const uint8_t* codes = block + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    float r = 0;
    for (int g = 0; g < ng; ++g) {
      __m512 a = _mm512_setzero_ps();
      for (int c = g * G; c < (g + 1) * G; c += 16) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_cvtepi32_ps(decode16<BITS>(codes + (size_t)c * BITS / 8)), a);
      }
      const size_t pi = token_param(L, t0 + i, g * G);
      const float S = half_at(block, L.scales_offset, pi) * L.scale_mult;
      r += S * _mm512_reduce_add_ps(a) + half_at(block, L.zeros_offset, pi) * qsum[g];
    }
    out[i] = r;
  }
}

template <int BITS>
void accumulate_rows(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out) {
  const int G = L.group, d = L.head_dim;
  for (int i = 0; i < n; ++i) {
    const uint8_t* codes = block + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    for (int g0 = 0; g0 < d; g0 += G) {
      const size_t pi = token_param(L, t0 + i, g0);
      const __m512 ws = _mm512_set1_ps(w[i] * (half_at(block, L.scales_offset, pi) * L.scale_mult));
      const __m512 wz = _mm512_set1_ps(w[i] * half_at(block, L.zeros_offset, pi));
      for (int c = g0; c < g0 + G; c += 16) {
        const __m512 q = _mm512_cvtepi32_ps(decode16<BITS>(codes + (size_t)c * BITS / 8));
        _mm512_storeu_ps(out + c, _mm512_fmadd_ps(q, ws, _mm512_add_ps(_mm512_loadu_ps(out + c), wz)));
      }
    }
  }
}

// 16 -> 8: 32 codes per step; the product fits an unsigned 32-bit lane (see the AVX2 file).
void shrink_16_to_8(const uint8_t* s, uint8_t* o, size_t& k, size_t total) {
  const __m512i add = _mm512_set1_epi32(128), mul = _mm512_set1_epi32(65281);
  for (; k + 32 <= total; k += 32) {
    const __m512i v = _mm512_loadu_si512(s + 2 * k);
    __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
    __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
    lo = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_add_epi32(lo, add), mul), 24);
    hi = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_add_epi32(hi, add), mul), 24);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k), _mm512_cvtepi32_epi8(lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k + 16), _mm512_cvtepi32_epi8(hi));
  }
}

// 64 bytes each < 16 -> 32 bytes: even | odd << 4.
__m256i pack_nibble_pairs(__m512i v) {
  const __m512i even = _mm512_and_si512(v, _mm512_set1_epi16(0x00FF));
  const __m512i odd = _mm512_srli_epi16(v, 8);
  return _mm512_cvtepi16_epi8(_mm512_or_si512(even, _mm512_slli_epi16(odd, 4)));
}

// 8 -> 4: 64 codes per step in 16-bit lanes.
void shrink_8_to_4(const uint8_t* s, uint8_t* o, size_t& k, size_t total) {
  const __m512i add = _mm512_set1_epi16(8), mul = _mm512_set1_epi16(241);
  for (; k + 64 <= total; k += 64) {
    const __m512i v = _mm512_loadu_si512(s + k);
    const __m512i even = _mm512_and_si512(v, _mm512_set1_epi16(0x00FF));
    const __m512i odd = _mm512_srli_epi16(v, 8);
    const __m512i e = _mm512_srli_epi16(_mm512_mullo_epi16(_mm512_add_epi16(even, add), mul), 12);
    const __m512i d = _mm512_srli_epi16(_mm512_mullo_epi16(_mm512_add_epi16(odd, add), mul), 12);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + k / 2),
                        _mm512_cvtepi16_epi8(_mm512_or_si512(e, _mm512_slli_epi16(d, 4))));
  }
}

// 4 -> 2 and 2 -> 1 through a nibble table (see the AVX2 file): 64 input bytes -> 32 output bytes.
void shrink_by_nibble_table(const uint8_t* s, uint8_t* o, size_t& k, size_t total, const uint8_t lut[16],
                            size_t codes_per_step) {
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lut)));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (; k + codes_per_step <= total; k += codes_per_step) {
    const __m512i v = _mm512_loadu_si512(s + k * 64 / codes_per_step);
    const __m512i l = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4));
    const __m512i h = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
    const __m512i nib = _mm512_or_si512(l, _mm512_slli_epi16(h, 2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + k * 32 / codes_per_step), pack_nibble_pairs(nib));
  }
}

}  // namespace

void quantize_avx512(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  if (!has_fast_path(L)) return quantize_ref(L, x, ldx, t0, n, block);
  with_bits(L.bits, [&](auto B) { quantize_rows<decltype(B)::value>(L, x, ldx, t0, n, block); });
}

void dequantize_avx512(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy) {
  if (!has_fast_path(L)) return dequantize_ref(L, block, t0, n, y, ldy);
  with_bits(L.bits, [&](auto B) { dequantize_rows<decltype(B)::value>(L, block, t0, n, y, ldy); });
}

void dot_avx512(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out) {
  if (!has_fast_path(L)) return dot_ref(L, block, q, t0, n, out);
  with_bits(L.bits, [&](auto B) { dot_rows<decltype(B)::value>(L, block, q, t0, n, out); });
}

void accumulate_avx512(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out) {
  if (!has_fast_path(L)) return accumulate_ref(L, block, w, t0, n, out);
  with_bits(L.bits, [&](auto B) { accumulate_rows<decltype(B)::value>(L, block, w, t0, n, out); });
}

void shrink_avx512(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block) {
  shrink_params_ref(src, src_block, dst, dst_block);
  const size_t total = (size_t)src.tokens * src.head_dim;
  const uint8_t* s = src_block + src.codes_offset;
  uint8_t* o = dst_block + dst.codes_offset;
  size_t k = 0;
  if (dst.bits == 8) {
    shrink_16_to_8(s, o, k, total);
  } else if (dst.bits == 4) {
    shrink_8_to_4(s, o, k, total);
  } else if (dst.bits == 2 || dst.bits == 1) {
    uint8_t lut[16];
    for (uint32_t v = 0; v < 16; ++v) {
      lut[v] = dst.bits == 2 ? (uint8_t)equivalent_shift_code(v, 2)
                             : (uint8_t)(equivalent_shift_code(v & 3, 1) | equivalent_shift_code(v >> 2, 1) << 1);
    }
    shrink_by_nibble_table(s, o, k, total, lut, dst.bits == 2 ? 128 : 256);
  }
  shrink_codes_ref(src, src_block, dst, dst_block, k, total);
}

}  // namespace mpkv

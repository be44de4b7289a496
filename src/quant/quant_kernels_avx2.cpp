// AVX2 + FMA + F16C variants of the KV block kernels (compiled with those flags only here).
// Fast paths: uniform codec, per-token groups (group % 8 == 0) at every bit-width; the shrink
// code stream for every halving. Anything else forwards to the _ref kernel (see quant_kernels.h).
//
// 8 consecutive codes of a row at `bits` <= 4 are one little-endian word of `bits` bytes with
// code k at bit k*bits (kv_block_layout.h), so one broadcast + variable shift decodes them all.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "quant/bits_dispatch.h"
#include "quant/equivalent_shift.h"
#include "quant/quant_kernels.h"
#include "quant/quant_options.h"
#include "quant/uniform_params.h"

namespace mpkv {
namespace {  // internal linkage: these copies are AVX2 code and must never be merged with others

template <int BITS>
__m256i lane_shifts8() {
  return _mm256_setr_epi32(0, BITS, 2 * BITS, 3 * BITS, 4 * BITS, 5 * BITS, 6 * BITS, 7 * BITS);
}

// 8 codes starting at byte p (a run of 8 codes) -> 8 int32 lanes.
template <int BITS>
__m256i decode8(const uint8_t* p) {
  if constexpr (BITS == 16) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (BITS == 8) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else {
    uint32_t w;
    if constexpr (BITS == 3) {
      w = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;  // a 3-byte memcpy is slow
    } else {
      w = 0;
      std::memcpy(&w, p, BITS);
    }
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), lane_shifts8<BITS>()),
                            _mm256_set1_epi32((1 << BITS) - 1));
  }
}

// 8 int32 codes (each < 2^BITS) -> packed at byte p.
template <int BITS>
void encode8(__m256i codes, uint8_t* p) {
  const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
  if constexpr (BITS == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(lo, hi));
  } else if constexpr (BITS == 8) {
    const __m128i w = _mm_packus_epi32(lo, hi);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  } else {
    const __m256i s = _mm256_sllv_epi32(codes, lane_shifts8<BITS>());
    __m128i a = _mm_or_si128(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    a = _mm_or_si128(a, _mm_shuffle_epi32(a, 0x4E));
    a = _mm_or_si128(a, _mm_shuffle_epi32(a, 0xB1));
    const uint32_t w = (uint32_t)_mm_cvtsi128_si32(a);
    if constexpr (BITS == 3) {
      p[0] = (uint8_t)w, p[1] = (uint8_t)(w >> 8), p[2] = (uint8_t)(w >> 16);
    } else {
      std::memcpy(p, &w, BITS);
    }
  }
}

float hmin(__m256 v) {
  __m128 a = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_min_ps(a, _mm_movehl_ps(a, a));
  a = _mm_min_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}
float hmax(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}
float hsum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

float half_at(const uint8_t* block, size_t offset, size_t i) { return _cvtsh_ss(load_half(block, offset, i)); }

// KvBlockLayout::param_index for the token axis, restated here: calling the header's inline member
// from this file could leave an AVX2-compiled out-of-line copy for the linker to share.
size_t token_param(const KvBlockLayout& L, int token, int channel) {
  return (size_t)token * (size_t)(L.head_dim / L.group) + (size_t)(channel / L.group);
}

bool has_fast_path(const KvBlockLayout& L) {
  return L.codec == Codec::uniform && L.axis == GroupAxis::token && L.group % 8 == 0;
}

template <int BITS>
void quantize_rows(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  const int G = L.group, d = L.head_dim;
  const __m256 qmax = _mm256_set1_ps((float)((1u << BITS) - 1u)), half = _mm256_set1_ps(0.5f);
  const __m256 zero = _mm256_setzero_ps();
  for (int i = 0; i < n; ++i) {
    const float* row = x + (size_t)i * ldx;
    uint8_t* codes = block + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    for (int g0 = 0; g0 < d; g0 += G) {
      __m256 lo = _mm256_loadu_ps(row + g0), hi = lo;
      for (int c = g0 + 8; c < g0 + G; c += 8) {
        const __m256 v = _mm256_loadu_ps(row + c);
        lo = _mm256_min_ps(lo, v);
        hi = _mm256_max_ps(hi, v);
      }
      const UniformGroupParams p = uniform_group_params(hmin(lo), hmax(hi), BITS);
      const size_t pi = token_param(L, t0 + i, g0);
      store_half(block, L.scales_offset, pi, p.scale_h);
      store_half(block, L.zeros_offset, pi, p.zero_h);
      const __m256 s = _mm256_set1_ps(p.scale), z = _mm256_set1_ps(p.zero);
      for (int c = g0; c < g0 + G; c += 8) {
        // Same operations as uniform_code: floor((x - z) / s + 0.5), clamp (NaN -> 0 via max's 2nd operand).
        __m256 t = _mm256_floor_ps(_mm256_add_ps(_mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(row + c), z), s), half));
        t = _mm256_min_ps(_mm256_max_ps(t, zero), qmax);
        encode8<BITS>(_mm256_cvttps_epi32(t), codes + (size_t)c * BITS / 8);
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
      const __m256 s = _mm256_set1_ps(half_at(block, L.scales_offset, pi) * L.scale_mult);
      const __m256 z = _mm256_set1_ps(half_at(block, L.zeros_offset, pi));
      for (int c = g0; c < g0 + G; c += 8) {
        const __m256 q = _mm256_cvtepi32_ps(decode8<BITS>(codes + (size_t)c * BITS / 8));
        _mm256_storeu_ps(out + c, _mm256_fmadd_ps(q, s, z));
      }
    }
  }
}

// q . x_hat = sum_g (S_g * sum_{c in g} q_c code_c + Z_g * sum_{c in g} q_c).
template <int BITS>
void dot_rows(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out) {
  const int G = L.group, d = L.head_dim, ng = d / G;
  float qsum[kMaxHeadDim / 8];
  for (int g = 0; g < ng; ++g) {
    __m256 a = _mm256_setzero_ps();
    for (int c = g * G; c < (g + 1) * G; c += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(q + c));
    qsum[g] = hsum(a);
  }
  for (int i = 0; i < n; ++i) {
    const uint8_t* codes = block + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    float r = 0;
    for (int g = 0; g < ng; ++g) {
      __m256 a = _mm256_setzero_ps();
      for (int c = g * G; c < (g + 1) * G; c += 8) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_cvtepi32_ps(decode8<BITS>(codes + (size_t)c * BITS / 8)), a);
      }
      const size_t pi = token_param(L, t0 + i, g * G);
      r += half_at(block, L.scales_offset, pi) * L.scale_mult * hsum(a) + half_at(block, L.zeros_offset, pi) * qsum[g];
    }
    out[i] = r;
  }
}

// out += w_i * (code * S + Z) = (w_i S) * code + w_i Z.
template <int BITS>
void accumulate_rows(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out) {
  const int G = L.group, d = L.head_dim;
  for (int i = 0; i < n; ++i) {
    const uint8_t* codes = block + L.codes_offset + (size_t)(t0 + i) * L.row_bytes;
    for (int g0 = 0; g0 < d; g0 += G) {
      const size_t pi = token_param(L, t0 + i, g0);
      const __m256 ws = _mm256_set1_ps(w[i] * (half_at(block, L.scales_offset, pi) * L.scale_mult));
      const __m256 wz = _mm256_set1_ps(w[i] * half_at(block, L.zeros_offset, pi));
      for (int c = g0; c < g0 + G; c += 8) {
        const __m256 q = _mm256_cvtepi32_ps(decode8<BITS>(codes + (size_t)c * BITS / 8));
        _mm256_storeu_ps(out + c, _mm256_fmadd_ps(q, ws, _mm256_add_ps(_mm256_loadu_ps(out + c), wz)));
      }
    }
  }
}

// 16 -> 8: 16 codes per step. (X + 128) * 65281 <= 65663 * 65281 < 2^32, so an unsigned 32-bit
// lane holds the product exactly (the exhaustive test checks it against the 64-bit formula).
void shrink_16_to_8(const uint8_t* s, uint8_t* o, size_t& k, size_t total) {
  const __m256i add = _mm256_set1_epi32(128), mul = _mm256_set1_epi32(65281);
  for (; k + 16 <= total; k += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * k));
    __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(v));
    __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1));
    lo = _mm256_srli_epi32(_mm256_mullo_epi32(_mm256_add_epi32(lo, add), mul), 24);
    hi = _mm256_srli_epi32(_mm256_mullo_epi32(_mm256_add_epi32(hi, add), mul), 24);
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);  // 16 x u16 in order
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k),
                     _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
  }
}

// Pairs of bytes (each holding a value < 16) -> one byte: even | odd << 4; 32 bytes -> 16.
__m128i pack_nibble_pairs(__m256i v) {
  const __m256i even = _mm256_and_si256(v, _mm256_set1_epi16(0x00FF));
  const __m256i odd = _mm256_srli_epi16(v, 8);
  const __m256i comb = _mm256_or_si256(even, _mm256_slli_epi16(odd, 4));
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi16(comb, comb), 0x08));
}

// 8 -> 4: 32 codes per step, in 16-bit lanes: (X + 8) * 241 <= 263 * 241 < 2^16.
void shrink_8_to_4(const uint8_t* s, uint8_t* o, size_t& k, size_t total) {
  const __m256i add = _mm256_set1_epi16(8), mul = _mm256_set1_epi16(241);
  for (; k + 32 <= total; k += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k));
    const __m256i even = _mm256_and_si256(v, _mm256_set1_epi16(0x00FF));
    const __m256i odd = _mm256_srli_epi16(v, 8);
    const __m256i e = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_add_epi16(even, add), mul), 12);
    const __m256i d = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_add_epi16(odd, add), mul), 12);
    const __m256i comb = _mm256_or_si256(e, _mm256_slli_epi16(d, 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k / 2),
                     _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi16(comb, comb), 0x08)));
  }
}

// 4 -> 2 and 2 -> 1: each input nibble maps through a 16-entry table to 2 output bits (one 2-bit
// code, or two 1-bit codes); a byte gives lut[lo] | lut[hi] << 2 (4 bits), pairs of bytes one byte.
// 32 input bytes per step -> 16 output bytes (codes_per_step = 64 or 128).
void shrink_by_nibble_table(const uint8_t* s, uint8_t* o, size_t& k, size_t total, const uint8_t lut[16],
                            size_t codes_per_step) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lut)));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (; k + codes_per_step <= total; k += codes_per_step) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k * 32 / codes_per_step));
    const __m256i l = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
    const __m256i h = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
    const __m256i nib = _mm256_or_si256(l, _mm256_slli_epi16(h, 2));  // h <= 3: stays inside its byte
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k * 16 / codes_per_step), pack_nibble_pairs(nib));
  }
}

}  // namespace

void quantize_avx2(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  if (!has_fast_path(L)) return quantize_ref(L, x, ldx, t0, n, block);
  with_bits(L.bits, [&](auto B) { quantize_rows<decltype(B)::value>(L, x, ldx, t0, n, block); });
}

void dequantize_avx2(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy) {
  if (!has_fast_path(L)) return dequantize_ref(L, block, t0, n, y, ldy);
  with_bits(L.bits, [&](auto B) { dequantize_rows<decltype(B)::value>(L, block, t0, n, y, ldy); });
}

void dot_avx2(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out) {
  if (!has_fast_path(L)) return dot_ref(L, block, q, t0, n, out);
  with_bits(L.bits, [&](auto B) { dot_rows<decltype(B)::value>(L, block, q, t0, n, out); });
}

void accumulate_avx2(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out) {
  if (!has_fast_path(L)) return accumulate_ref(L, block, w, t0, n, out);
  with_bits(L.bits, [&](auto B) { accumulate_rows<decltype(B)::value>(L, block, w, t0, n, out); });
}

void shrink_avx2(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block) {
  shrink_params_ref(src, src_block, dst, dst_block);
  const size_t total = (size_t)src.tokens * src.head_dim;
  const uint8_t* s = src_block + src.codes_offset;
  uint8_t* o = dst_block + dst.codes_offset;
  size_t k = 0;  // flat code index reached by the vector loop; the tail goes through _ref
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
    shrink_by_nibble_table(s, o, k, total, lut, dst.bits == 2 ? 64 : 128);
  }
  shrink_codes_ref(src, src_block, dst, dst_block, k, total);
}

}  // namespace mpkv

// Scalar IEEE half and bfloat16 conversions (exact, round-to-nearest-even on the way down).
// SIMD code converts with F16C inside *_avx2.cpp / *_avx512.cpp files; these are the reference.
#pragma once
#include <cstdint>
#include <cstring>

namespace mpkv {

inline float fp32_from_bits(uint32_t w) { float f; std::memcpy(&f, &w, 4); return f; }
inline uint32_t fp32_to_bits(float f) { uint32_t w; std::memcpy(&w, &f, 4); return w; }

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return fp32_from_bits(sign);
    // subnormal: normalise
    int e = -1;
    do { e++; mant <<= 1; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return fp32_from_bits(sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13));
  }
  if (exp == 31) return fp32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / nan
  return fp32_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = fp32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {
    // result is subnormal (or zero) in half: value = m * 2^-24
    if (absx < 0x33000000u) return (uint16_t)sign;  // < 2^-25: rounds to zero
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) ... bring to units of 2^-24
    uint32_t r = m >> (shift - 0);
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

inline float bf16_to_fp32(uint16_t b) { return fp32_from_bits((uint32_t)b << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = fp32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

}  // namespace mpkv

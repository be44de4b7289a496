// Host/device portability for the CUDA code's per-element math (docs/cuda.md, "Shared math").
// Every helper marked MPKV_HD compiles twice: as plain C++ (g++, the CPU tests in tests/unit/
// test_cuda_*.cpp run it against the CPU _ref kernels) and as device code (nvcc, src/cuda/*.cu).
// The only place the two differ is the fp16 conversions below: the host calls util/fp16.h and
// quant/uniform_params.h, the device the hardware conversions, which round the same way (IEEE
// round-to-nearest-even, toward -inf, toward +inf); tests/cuda checks them bit for bit on a GPU.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define MPKV_HD __host__ __device__ __forceinline__
#else
#define MPKV_HD inline
#endif
// Unrolls a loop in device code only (the host compiler would warn about the pragma).
#if defined(__CUDA_ARCH__)
#define MPKV_UNROLL _Pragma("unroll")
#else
#define MPKV_UNROLL
#endif

#if !defined(__CUDA_ARCH__)
#include <cmath>

#include "quant/uniform_params.h"
#include "util/fp16.h"
#endif

namespace mpkv::cuda {

MPKV_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return fp16_to_fp32(h);
#endif
}

// Round to nearest even, toward -inf, toward +inf.
MPKV_HD uint16_t float_to_half_rn(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return fp32_to_fp16(f);
#endif
}
MPKV_HD uint16_t float_to_half_down(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rd(f));
#else
  return fp16_round_down(f);
#endif
}
MPKV_HD uint16_t float_to_half_up(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_ru(f));
#else
  return fp16_round_up(f);
#endif
}

// a * b + c rounded twice, never fused: the CPU _ref kernels compute dequantized values this way
// (no FMA), and nvcc would otherwise contract it into one fma.
MPKV_HD float mul_add_unfused(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(a, b), c);
#else
  return a * b + c;
#endif
}

MPKV_HD float floor_f(float x) {
#if defined(__CUDA_ARCH__)
  return floorf(x);
#else
  return std::floor(x);
#endif
}

MPKV_HD float exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// Little-endian 16-bit load from any byte offset (fp16 scales and zeros may sit at odd offsets:
// a block's code section can have an odd length, kv_block_layout.h).
MPKV_HD uint16_t load_u16(const uint8_t* p) { return (uint16_t)(p[0] | ((uint32_t)p[1] << 8)); }
MPKV_HD void store_u16(uint8_t* p, uint16_t v) {
  p[0] = (uint8_t)(v & 0xffu);
  p[1] = (uint8_t)(v >> 8);
}

}  // namespace mpkv::cuda

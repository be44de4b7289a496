// The scalar SiLU gate: the fixed exp of activation_kernels.h, one element at a time. Compiled
// without -mfma, so std::fma is libm's fmaf (correctly rounded, as vfmadd) and no product is
// contracted into an fma the SIMD tiers do not have.
#include <cmath>
#include <cstring>

#include "model/activation_kernels.h"

namespace mpkv {

namespace {

// e(x) of activation_kernels.h for x = -g (clamped as _mm*_max_ps / _mm*_min_ps do: a NaN takes
// the bound, the quotient is NaN anyway).
float silu_exp(float x) {
  using C = SiluExpConst;
  x = x > C::kLo ? x : C::kLo;
  x = x < C::kHi ? x : C::kHi;
  const float n = std::nearbyint(x * C::kLog2e);  // the default rounding mode: half to even
  const float r = std::fma(n, -C::kLn2Lo, std::fma(n, -C::kLn2Hi, x));
  float p = C::kC[0];
  for (int k = 1; k < 6; ++k) p = std::fma(p, r, C::kC[k]);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  uint32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += (uint32_t)(int32_t)n << 23;
  std::memcpy(&p, &bits, 4);
  return p;
}

}  // namespace

void silu_mul_ref(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float den = 1.0f + silu_exp(-g);
    gate[i] = g / den * up[i];
  }
}

}  // namespace mpkv

// The feed-forward's SiLU gate, out of the scalar op loop, and its per-ISA table (the avx512
// tier uses the AVX2 kernel)
// (src/util/cpu_features.h picks the tier once; MPKV_ISA forces it down). docs/numerics.md,
// "Feed-forward activation".
//
//   silu_mul  gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e(-g)), where e is the fixed
//             fp32 exp below, so every tier gives the same bits (no std::exp, whose bits are
//             libm's):
//               x = min(max(-g, -87), 88)                   (e never overflows nor goes subnormal)
//               n = round_half_even(x * log2(e))             (one rounded fp32 product, then rint)
//               r = fma(n, -ln2_lo, fma(n, -ln2_hi, x))      (Cody-Waite, |r| <= 0.347)
//               p = Horner fma chain of the degree-7 Taylor polynomial of exp(r), 1/7! first
//               e = p * 2^n                                  (added to p's exponent bits: exact)
//             then 1 + e, the quotient and the product by up, each rounded once. No step is a
//             multiply followed by an add that a compiler could contract into an fma (the
//             scaling is an integer add), so the scalar table (libm fmaf) and the SIMD tables
//             (vfmadd) compute the same chain. silu is within 2 ulp of g / (1 + exp(-g)) for
//             -87 <= g < 87, exactly g above (test_model_activation_kernels holds every tier to
//             the _ref bits and the _ref to long double exp; measured worst 1.2 ulp). g = +inf gives inf * up; g = -inf gives -inf / e(88) * up = -inf
//             (std::exp's would be NaN); a NaN gate gives NaN.
#pragma once
#include <cstdint>

#include "util/cpu_features.h"

namespace mpkv {

using SiluMulFn = void (*)(float* gate, const float* up, int64_t n);

struct ActivationKernels {
  Isa isa;
  SiluMulFn silu_mul;
};

// The table for active_isa(), chosen once.
const ActivationKernels& activation_kernels();
// The table of one tier (tests); throws Error when this CPU cannot run it.
const ActivationKernels& activation_kernels_for(Isa isa);

// The constants of the fixed exp above (shared by every tier's file).
struct SiluExpConst {
  static constexpr float kLo = -87.0f, kHi = 88.0f;
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693145751953125f;       // 11 significant bits: n * kLn2Hi exact
  static constexpr float kLn2Lo = 1.428606765330187045e-06f;  // ln 2 - kLn2Hi
  // 1/k! for k = 7 .. 2 (then the chain ends fma(p, r, 1), fma(p, r, 1)).
  static constexpr float kC[6] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f};
};

void silu_mul_ref(float* gate, const float* up, int64_t n);
void silu_mul_avx2(float* gate, const float* up, int64_t n);

}  // namespace mpkv

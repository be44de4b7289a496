// exp in double precision for the sampler's weights (sampler_kernels.h, exp_weights), shared by
// the AVX2 and AVX-512 files: k = round(x log2 e), r = x - k ln 2 (ln 2 in two parts, |r| <= 0.347),
// exp(r) by its Taylor polynomial of degree 11 (truncation r^12 / 12! < 6.4e-15 relative), times 2^k.
// Inputs are clamped to [-200, 0] first (exp(-200) rounds to float 0; 2^k stays a normal double);
// a NaN becomes -200, weight 0.
#pragma once

namespace mpkv::sampler_exp {

inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;
inline constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;
inline constexpr double kLowest = -200.0;
// 1 / j!, j = 0..11
inline constexpr double kInvFactorial[12] = {1.0,
                                             1.0,
                                             1.0 / 2,
                                             1.0 / 6,
                                             1.0 / 24,
                                             1.0 / 120,
                                             1.0 / 720,
                                             1.0 / 5040,
                                             1.0 / 40320,
                                             1.0 / 362880,
                                             1.0 / 3628800,
                                             1.0 / 39916800};

}  // namespace mpkv::sampler_exp

// Orthonormal fast Walsh-Hadamard transform over head_dim (rotated and turbo quantizers).
//
// H_d = H_2 (x) ... (x) H_2 / sqrt(d), entries (-1)^popcount(i & j) / sqrt(d): symmetric and
// orthonormal, so H H = I (the transform is its own inverse) and (H q) . (H k) = q . k.
// Turbo uses the random-sign version T = H D (D = diag of +-1 from a seed): T^-1 = D H.
#pragma once
#include <cstdint>
#include <vector>

namespace mpkv {

// x[d] <- H x, in place; d must be a power of two (callers validate; checked here too).
void fwht_orthonormal(float* x, int d);

// d signs (+1.0f / -1.0f) drawn from `seed` with splitmix64, the same on every machine.
std::vector<float> random_signs(uint64_t seed, int d);

}  // namespace mpkv

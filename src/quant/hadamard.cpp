#include "quant/hadamard.h"

#include <cmath>
#include <string>

#include "util/error.h"

namespace mpkv {

void fwht_orthonormal(float* x, int d) {
  MPKV_CHECK(d > 0 && (d & (d - 1)) == 0, "Hadamard transform needs a power-of-two length, got " + std::to_string(d));
  for (int len = 1; len < d; len <<= 1) {
    for (int i = 0; i < d; i += 2 * len) {
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  const float s = 1.0f / std::sqrt((float)d);
  for (int i = 0; i < d; ++i) x[i] *= s;
}

std::vector<float> random_signs(uint64_t seed, int d) {
  std::vector<float> s((size_t)d);
  uint64_t state = seed;
  for (int i = 0; i < d; ++i) {
    // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    s[(size_t)i] = (z >> 63) ? -1.0f : 1.0f;
  }
  return s;
}

}  // namespace mpkv

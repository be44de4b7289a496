// The 6-bit sub-block scales and mins of Q4_K / Q5_K, packed in 12 bytes per super-block of 256
// (8 sub-blocks of 32), as ggml defines them:
//   sub-block j < 4:  scale = q[j] & 63,                           min = q[j + 4] & 63
//   sub-block j >= 4: scale = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4,
//                     min   = (q[j + 4] >> 4) | (q[j]     >> 6) << 4
// Shared by the dequantizer and the scalar matvec reference. Not for *_avx2.cpp / *_avx512.cpp
// files: an inline function compiled with ISA flags could be the copy the linker keeps for all.
#pragma once
#include <cstdint>

namespace mpkv {

inline void k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace mpkv

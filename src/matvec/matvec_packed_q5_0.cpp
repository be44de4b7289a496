// Repacking of Q5_0 blocks into the x16 layout of matvec_packed_q5_0.h, and its scalar reference kernel.
#include "matvec/matvec_packed_q5_0.h"

#include <cmath>
#include <cstring>
#include <string>

#include "matvec/matvec.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {

void pack_q5_0_block(const WeightMatrix& w, int64_t g, int64_t b, uint8_t* out) {
  for (int r = 0; r < kPackRows; ++r) {
    const int64_t row = g * kPackRows + r;
    if (row >= w.rows) continue;
    const BlockQ5_0& src = reinterpret_cast<const BlockQ5_0*>(w.data + (size_t)row * w.row_bytes)[b];
    for (int c = 0; c < 4; ++c) std::memcpy(out + kPackedChunkBytes * c + 4 * r, src.qs + 4 * c, 4);
    const float m = -16.0f * fp16_to_fp32(src.d);
    const uint16_t m16 = fp32_to_fp16(m);
    MPKV_CHECK(fp16_to_fp32(m16) == m || std::isnan(m),
               "matvec: Q5_0 row " + std::to_string(row) + " has a scale too large to pack (-16 d = " +
                   std::to_string(m) + ")");
    std::memcpy(out + kPackedQ5_0ScaleAt + 2 * r, &src.d, 2);
    std::memcpy(out + kPackedQ5_0MinAt + 2 * r, &m16, 2);
    uint32_t qh;
    std::memcpy(&qh, src.qh, 4);
    for (int i = 0; i < 4; ++i) {
      uint8_t bits = 0;
      for (int t = 0; t < 8; ++t) bits = (uint8_t)(bits | ((qh >> (4 * t + i)) & 1u) << t);
      out[kPackedQ5_0HighBitsAt + 4 * r + i] = bits;
    }
  }
}

void packed_q5_0_ref(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  for (int v = 0; v < nv; ++v) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + (size_t)b * kPackedQ5_0BlockBytes;
        const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
        int isum = 0;
        for (int j = 0; j < 32; ++j) {
          const uint8_t byte = blk[kPackedChunkBytes * ((j % 16) / 4) + 4 * r + j % 4];
          const int high = (blk[kPackedQ5_0HighBitsAt + 4 * r + j % 4] >> (j / 4)) & 1;
          isum += ((j < 16 ? byte & 0x0f : byte >> 4) | high << 4) * a.qs[j];
        }
        uint16_t d, m;
        std::memcpy(&d, blk + kPackedQ5_0ScaleAt + 2 * r, 2);
        std::memcpy(&m, blk + kPackedQ5_0MinAt + 2 * r, 2);
        acc = std::fma(fp16_to_fp32(d) * a.d, (float)isum, acc);
        acc = std::fma(fp16_to_fp32(m), a.s, acc);
      }
      out[(size_t)v * kPackRows + r] = acc;
    }
  }
}

}  // namespace mpkv

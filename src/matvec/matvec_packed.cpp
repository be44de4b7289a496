// Repacking of GGUF weight rows into the row-interleaved layouts of matvec_packed.h.
#include "matvec/matvec_packed.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "matvec/matvec.h"
#include "matvec/matvec_packed_kquant.h"
#include "matvec/matvec_packed_q5_0.h"
#include "util/error.h"

namespace mpkv {

namespace {

size_t packed_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_1: return kPackedQ4_1BlockBytes;
    case GgmlType::Q8_0: return kPackedQ8_0BlockBytes;
    case GgmlType::Q5_0: return kPackedQ5_0BlockBytes;
    default: return packed_kquant_block_bytes(type);
  }
}

// Block b of group g from the GGUF rows (rows past the matrix stay zero: d = m = 0, codes 0).
void pack_q4_1_block(const WeightMatrix& w, int64_t g, int64_t b, uint8_t* out) {
  for (int r = 0; r < kPackRows; ++r) {
    const int64_t row = g * kPackRows + r;
    if (row >= w.rows) continue;
    const BlockQ4_1& src = reinterpret_cast<const BlockQ4_1*>(w.data + (size_t)row * w.row_bytes)[b];
    for (int c = 0; c < 4; ++c) std::memcpy(out + kPackedChunkBytes * c + 4 * r, src.qs + 4 * c, 4);
    std::memcpy(out + kPackedQ4_1ScaleAt + 2 * r, &src.d, 2);
    std::memcpy(out + kPackedQ4_1MinAt + 2 * r, &src.m, 2);
  }
}

void pack_q8_0_block(const WeightMatrix& w, int64_t g, int64_t b, uint8_t* out) {
  for (int r = 0; r < kPackRows; ++r) {
    const int64_t row = g * kPackRows + r;
    if (row >= w.rows) continue;
    const BlockQ8_0& src = reinterpret_cast<const BlockQ8_0*>(w.data + (size_t)row * w.row_bytes)[b];
    for (int c = 0; c < 8; ++c) std::memcpy(out + kPackedChunkBytes * c + 4 * r, src.qs + 4 * c, 4);
    std::memcpy(out + kPackedQ8_0ScaleAt + 2 * r, &src.d, 2);
    int16_t sum = 0;
    for (int j = 0; j < 32; ++j) sum = (int16_t)(sum + src.qs[j]);  // |sum| <= 4096
    std::memcpy(out + kPackedQ8_0SumAt + 2 * r, &sum, 2);
  }
}

}  // namespace

void PackedMatrix::Free::operator()(uint8_t* p) const { std::free(p); }

PackedMatrix::PackedMatrix(GgmlType type, int64_t rows, int64_t cols)
    : type_(type), rows_(rows), cols_(cols), group_bytes_(packed_block_bytes(type) * (size_t)(cols / 32)) {
  MPKV_ASSERT(group_bytes_ > 0 && rows >= 0, "PackedMatrix: no packed layout for this type or shape");
  const size_t size = (size_bytes() + 63) / 64 * 64;
  bytes_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, size == 0 ? 64 : size)));
  if (!bytes_) throw std::bad_alloc();
  std::memset(bytes_.get(), 0, size);
}

bool has_packed_layout(GgmlType type) { return packed_block_bytes(type) > 0; }

std::unique_ptr<PackedMatrix> pack_weight_matrix(const WeightMatrix& w) {
  check_weight_matrix(w);
  if (!has_packed_layout(w.type)) return nullptr;
  auto p = std::make_unique<PackedMatrix>(w.type, w.rows, w.cols);
  const int64_t nb = w.cols / 32;
  const size_t block_bytes = packed_block_bytes(w.type);
  for (int64_t g = 0; g < p->groups(); ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = p->mutable_group(g) + (size_t)b * block_bytes;
      if (w.type == GgmlType::Q4_1) pack_q4_1_block(w, g, b, out);
      else if (w.type == GgmlType::Q8_0) pack_q8_0_block(w, g, b, out);
      else if (w.type == GgmlType::Q5_0) pack_q5_0_block(w, g, b, out);
      else pack_kquant_block(w, g, b, out);
    }
  }
  return p;
}

}  // namespace mpkv

// Test fixtures for the matvec tests: random weight matrices encoded block by block in the GGUF
// layouts (scalar encoders written here, independent of src/matvec), hand decoding to double, the
// error bounds the tests check against, and random activations.
//
// Error bounds (all per output element y_r = sum_j w_rj x_j, exact value computed in double):
//  * Activation quantization (integer-dot types only). x is quantized per 32-block b to x^_j = d_b q_j
//    with d_b = max_b|x| / 127 and q_j = round(x_j / d_b), so |x_j - x^_j| <= d_b / 2 (up to a few
//    ulps of x_j / d_b, covered by kActStepSlack). Hence |sum_j w_j (x_j - x^_j)| <=
//    sum_b (max_b|x| / 254) * sum_{j in b} |w_j| -- a strict bound, typically ~0.5-1% of
//    sum_j |w_j x_j| for Gaussian activations (max|x| / 254 against a mean |x| ~ max/3).
//  * fp32 rounding. Integer block sums are exact; what rounds is each block's scale product and its
//    share of the fp32 sum, at most (2 * n_blocks + kFixedRoundings) roundings of the block
//    components, each <= 2^-24 relative. The components are bounded by `mag_j * |x_j|`, where mag_j
//    is the largest magnitude an element's code and offset term can reach in its block (e.g. Q4_1:
//    15|d| + |m|; Q4_0 via the -8*d*s offset: (15 + 8)|d|). Float-dot types round once per product
//    and once per addition: Higham's gamma_n ~ n * 2^-24 relative to sum |w_j x_j|.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "gguf/dequant.h"
#include "gguf/ggml_types.h"
#include "gguf/kquant_scales.h"
#include "matvec/matvec.h"
#include "util/fp16.h"

namespace mpkv {
// gtest prints parameters with this (instead of "4-byte object <03-00 00-00>").
inline void PrintTo(GgmlType t, std::ostream* os) { *os << ggml_type_name((uint32_t)t); }
}  // namespace mpkv

namespace mpkv::test {

constexpr double kUnitRoundoff = 0x1p-24;  // fp32 round-to-nearest relative error
// x_j * (1/d) differs from x_j / d by a few ulps, so |x_j - d q_j| <= (d/2) * (1 + kActStepSlack).
constexpr double kActStepSlack = 1e-5;
// Roundings per output outside the per-block ones: scale products, the offset sum, its scaling,
// the final add and the horizontal sums of up to 16 lanes.
constexpr int kFixedRoundings = 24;

inline bool is_k_quant_type(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K; }
inline bool is_quant_dot_type(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
         t == GgmlType::Q8_0 || is_k_quant_type(t);
}
inline bool is_float_dot_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16; }

// Relative fp32 rounding bound (against sum_j mag_j |x_j|) of one kernel's output for `cols`.
inline double fp32_rel_bound(GgmlType t, int64_t cols) {
  if (is_quant_dot_type(t)) return (2.0 * (double)(cols / 32) + kFixedRoundings) * kUnitRoundoff;
  return ((double)cols + kFixedRoundings) * kUnitRoundoff;  // float dot (incl. the dequant fallback)
}

// A [rows, cols] weight matrix in `type`'s encoding, with its exact decoded values and magnitudes.
struct TestMatrix {
  GgmlType type;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> bytes;  // rows * row_bytes (rows may be padded beyond the data)
  std::vector<double> w;       // [rows, cols] decoded weights
  std::vector<double> mag;     // [rows, cols] per-element component magnitude (see header comment)
  WeightMatrix view() const { return WeightMatrix{type, rows, cols, bytes.data(), row_bytes}; }
};

inline uint16_t rand_half(std::mt19937& rng, float lo, float hi, bool random_sign) {
  std::uniform_real_distribution<float> u(lo, hi);
  float v = u(rng);
  if (random_sign && (rng() & 1)) v = -v;
  return fp32_to_fp16(v);
}

inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

// mag of a K-quant row (see the header comment): per sub-block, the largest |code| times its scale
// plus the min term: Q4_K / Q5_K |d sc_k| * (15 / 31) + |dmin m_k| per 32, Q6_K |d sc| * 32 per 16.
// The scales are unpacked by gguf/kquant_scales.h (its packing is checked by test_gguf_dequant).
inline void k_quant_magnitudes(GgmlType t, const uint8_t* row, int64_t cols, double* mag) {
  const size_t bsize = ggml_type_info((uint32_t)t)->type_size;
  for (int64_t sb = 0; sb < cols / QK_K; ++sb) {
    const uint8_t* blk = row + sb * bsize;
    double* m = mag + sb * QK_K;
    if (t == GgmlType::Q6_K) {
      const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(blk);
      const double d = std::fabs(fp16_to_fp32(b->d));
      for (int j = 0; j < QK_K; ++j) m[j] = d * std::abs(b->scales[j / 16]) * 32;  // scale index = element / 16
      continue;
    }
    uint16_t dh, dminh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&dminh, blk + 2, 2);
    const double d = std::fabs(fp16_to_fp32(dh)), dmin = std::fabs(fp16_to_fp32(dminh));
    for (int k = 0; k < 8; ++k) {
      uint8_t sc, mn;
      k_scale_min(k, blk + 4, &sc, &mn);
      for (int j = 0; j < 32; ++j) m[32 * k + j] = d * sc * (t == GgmlType::Q4_K ? 15 : 31) + dmin * mn;
    }
  }
}

// Hand decoder (to double) for the simple types, from the ggml format definition; the K-quants
// go through gguf's dequantize_row (not the code under test here). Fills w[cols], mag[cols].
inline void decode_row(GgmlType t, const uint8_t* row, int64_t cols, double* w, double* mag) {
  auto nib = [](const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4); };
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: {
      const bool five = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
      const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
      const size_t bsize = t == GgmlType::Q4_0 ? 18 : t == GgmlType::Q4_1 ? 20 : t == GgmlType::Q5_0 ? 22 : 24;
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = row + b * bsize;
        uint16_t dh, mh = 0;
        std::memcpy(&dh, blk, 2);
        if (has_min) std::memcpy(&mh, blk + 2, 2);
        const uint8_t* after = blk + (has_min ? 4 : 2);
        const uint32_t qh = five ? load_u32(after) : 0;
        const uint8_t* qs = after + (five ? 4 : 0);
        const double d = fp16_to_fp32(dh), m = fp16_to_fp32(mh);
        const int offset = has_min ? 0 : (five ? 16 : 8);
        const int qmax = five ? 31 : 15;
        for (int j = 0; j < 32; ++j) {
          const int q = nib(qs, j) | (five ? (int)((qh >> j) & 1u) << 4 : 0);
          w[b * 32 + j] = has_min ? d * q + m : d * (q - offset);
          mag[b * 32 + j] = std::fabs(d) * (qmax + offset) + std::fabs(m);
        }
      }
      return;
    }
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = row + b * 34;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const double d = fp16_to_fp32(dh);
        for (int j = 0; j < 32; ++j) {
          w[b * 32 + j] = d * (int8_t)blk[2 + j];
          mag[b * 32 + j] = std::fabs(d) * 128;
        }
      }
      return;
    case GgmlType::F32:
      for (int64_t j = 0; j < cols; ++j) { float v; std::memcpy(&v, row + 4 * j, 4); w[j] = v; mag[j] = std::fabs(v); }
      return;
    case GgmlType::F16: case GgmlType::BF16:
      for (int64_t j = 0; j < cols; ++j) {
        uint16_t h;
        std::memcpy(&h, row + 2 * j, 2);
        w[j] = t == GgmlType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
        mag[j] = std::fabs(w[j]);
      }
      return;
    default: {
      std::vector<float> tmp(cols);
      dequantize_row(t, row, tmp.data(), cols);
      for (int64_t j = 0; j < cols; ++j) { w[j] = tmp[j]; mag[j] = std::fabs(w[j]); }
      if (is_k_quant_type(t)) k_quant_magnitudes(t, row, cols, mag);
      return;
    }
  }
}

// Random bytes for one row of `t`: random scales (fp16 d in +-[0.002, 0.05], m in [-0.4, 0.4]) and
// uniformly random codes (Q8_0 codes cover the full [-128, 127], -128 included).
inline void encode_random_row(GgmlType t, uint8_t* row, int64_t cols, std::mt19937& rng) {
  const size_t nbytes = ggml_row_bytes(t, cols);
  for (size_t i = 0; i < nbytes; ++i) row[i] = (uint8_t)rng();  // random codes / qh / K-scales
  auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: {
      const size_t bsize = ggml_type_info((uint32_t)t)->type_size;
      for (int64_t b = 0; b < cols / 32; ++b) put16(row + b * bsize, rand_half(rng, 0.002f, 0.05f, true));
      return;
    }
    case GgmlType::Q4_1: case GgmlType::Q5_1: {
      const size_t bsize = ggml_type_info((uint32_t)t)->type_size;
      for (int64_t b = 0; b < cols / 32; ++b) {
        put16(row + b * bsize, rand_half(rng, 0.002f, 0.05f, true));
        put16(row + b * bsize + 2, rand_half(rng, 0.0f, 0.4f, true));
      }
      return;
    }
    case GgmlType::Q4_K: case GgmlType::Q5_K: {  // d, dmin first; scales/codes stay random
      const size_t bsize = ggml_type_info((uint32_t)t)->type_size;
      for (int64_t b = 0; b < cols / 256; ++b) {
        put16(row + b * bsize, rand_half(rng, 0.001f, 0.01f, false));
        put16(row + b * bsize + 2, rand_half(rng, 0.001f, 0.01f, false));
      }
      return;
    }
    case GgmlType::Q6_K:  // d is the last 2 bytes of each 210-byte block
      for (int64_t b = 0; b < cols / 256; ++b) put16(row + b * 210 + 208, rand_half(rng, 0.001f, 0.01f, true));
      return;
    case GgmlType::F32: {
      std::normal_distribution<float> g(0.0f, 0.1f);
      for (int64_t j = 0; j < cols; ++j) { const float v = g(rng); std::memcpy(row + 4 * j, &v, 4); }
      return;
    }
    case GgmlType::F16: case GgmlType::BF16: {
      std::normal_distribution<float> g(0.0f, 0.1f);
      for (int64_t j = 0; j < cols; ++j) {
        const float v = g(rng);
        put16(row + 2 * j, t == GgmlType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v));
      }
      return;
    }
    default:
      return;  // other types: random bytes (used only to provoke errors)
  }
}

// Rows are padded by `pad` bytes to check that row_bytes, not the packed size, is the row stride.
inline TestMatrix make_test_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed, size_t pad = 0) {
  std::mt19937 rng(seed);
  TestMatrix m;
  m.type = t;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = ggml_row_bytes(t, cols) + pad;
  m.bytes.assign((size_t)rows * m.row_bytes, 0xA5);
  m.w.resize((size_t)rows * cols);
  m.mag.resize((size_t)rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = m.bytes.data() + (size_t)r * m.row_bytes;
    encode_random_row(t, row, cols, rng);
    decode_row(t, row, cols, m.w.data() + (size_t)r * cols, m.mag.data() + (size_t)r * cols);
  }
  return m;
}

// Activations like a transformer's: N(0, 1) with a few outlier channels (x20) and, when cols >= 64,
// one all-zero 32-block (d = 0 path).
inline std::vector<float> make_activations(int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(cols);
  for (auto& v : x) v = g(rng);
  for (int k = 0; k < 3 && cols > 0; ++k) x[rng() % cols] *= 20.0f;
  if (cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  return x;
}

struct RowBounds {
  double exact;      // sum_j w_j x_j in double
  double act_bound;  // activation-quantization bound (0 for float-dot types)
  double fp_scale;   // sum_j mag_j |x_j|: multiply by a relative fp32 bound
};

inline RowBounds row_bounds(const TestMatrix& m, int64_t r, const float* x) {
  RowBounds rb{0, 0, 0};
  const double* w = m.w.data() + (size_t)r * m.cols;
  const double* mag = m.mag.data() + (size_t)r * m.cols;
  for (int64_t j = 0; j < m.cols; ++j) {
    rb.exact += w[j] * (double)x[j];
    rb.fp_scale += mag[j] * std::fabs((double)x[j]);
  }
  if (is_quant_dot_type(m.type)) {
    for (int64_t b = 0; b < m.cols / 32; ++b) {
      double amax = 0, wsum = 0;
      for (int j = 0; j < 32; ++j) {
        amax = std::max(amax, std::fabs((double)x[b * 32 + j]));
        wsum += std::fabs(w[b * 32 + j]);
      }
      rb.act_bound += amax / 254.0 * (1.0 + kActStepSlack) * wsum;
    }
  }
  return rb;
}

}  // namespace mpkv::test

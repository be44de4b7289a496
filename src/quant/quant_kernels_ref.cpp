// Scalar reference kernels: the definitions every SIMD variant is tested against.
#include <algorithm>
#include <cmath>
#include <string>

#include "quant/equivalent_shift.h"
#include "quant/lloyd_max.h"
#include "quant/quant_kernels.h"
#include "quant/uniform_params.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {

namespace {

// The true scale (uniform: stored fp16 times the layout's scale_mult) or the Lloyd-Max norm.
float param_scale(const KvBlockLayout& L, const uint8_t* block, size_t i) {
  const float stored = fp16_to_fp32(load_half(block, L.scales_offset, i));
  return L.codec == Codec::uniform ? stored * L.scale_mult : stored;
}
float param_zero(const KvBlockLayout& L, const uint8_t* block, size_t i) {
  return fp16_to_fp32(load_half(block, L.zeros_offset, i));
}

// x_hat of code (t, c) in code space.
float dequant_one(const KvBlockLayout& L, const uint8_t* block, const LloydMaxCodebook* cb, int t, int c) {
  const uint32_t code = get_code(L, block, t, c);
  const size_t pi = L.param_index(t, c);
  if (L.codec == Codec::lloyd_max) {
    return cb->centroids_f[code] * (param_scale(L, block, pi) / std::sqrt((float)L.head_dim));
  }
  return (float)code * param_scale(L, block, pi) + param_zero(L, block, pi);
}

const LloydMaxCodebook* codebook_of(const KvBlockLayout& L) {
  return L.codec == Codec::lloyd_max ? &lloyd_max_gaussian(L.bits) : nullptr;
}

void quantize_lloyd_max_ref(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  const LloydMaxCodebook& cb = lloyd_max_gaussian(L.bits);
  const int d = L.head_dim;
  const int n_thr = (int)cb.thresholds_f.size();
  for (int i = 0; i < n; ++i) {
    const float* row = x + (size_t)i * ldx;
    double ss = 0;
    for (int c = 0; c < d; ++c) ss += (double)row[c] * row[c];
    const float norm = (float)std::sqrt(ss);
    store_half(block, L.scales_offset, (size_t)(t0 + i), fp32_to_fp16(std::min(norm, kFp16Max)));
    // Coordinates of the unit vector, scaled to the unit-Gaussian codebook: u = y * sqrt(d) / ||y||.
    const float k = norm > 0 ? std::sqrt((float)d) / norm : 0.0f;
    for (int c = 0; c < d; ++c) {
      const float u = row[c] * k;
      uint32_t code = 0;
      while ((int)code < n_thr && cb.thresholds_f[code] <= u) ++code;
      set_code(L, block, t0 + i, c, code);
    }
  }
}

void quantize_token_axis_ref(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  const float qmax = (float)((1u << L.bits) - 1u);
  const int G = L.group;
  for (int i = 0; i < n; ++i) {
    const float* row = x + (size_t)i * ldx;
    for (int g0 = 0; g0 < L.head_dim; g0 += G) {
      float lo = row[g0], hi = row[g0];
      for (int c = g0; c < g0 + G; ++c) lo = std::min(lo, row[c]), hi = std::max(hi, row[c]);
      const UniformGroupParams p = uniform_group_params(lo, hi, L.bits);
      const size_t pi = L.param_index(t0 + i, g0);
      store_half(block, L.scales_offset, pi, p.scale_h);
      store_half(block, L.zeros_offset, pi, p.zero_h);
      for (int c = g0; c < g0 + G; ++c) set_code(L, block, t0 + i, c, uniform_code(row[c], p.scale, p.zero, qmax));
    }
  }
}

void quantize_channel_axis_ref(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  const float qmax = (float)((1u << L.bits) - 1u);
  const int G = L.group;
  for (int i0 = 0; i0 < n; i0 += G) {  // one token group: rows i0 .. i0 + G - 1
    for (int c = 0; c < L.head_dim; ++c) {
      float lo = x[(size_t)i0 * ldx + c], hi = lo;
      for (int i = i0; i < i0 + G; ++i) lo = std::min(lo, x[(size_t)i * ldx + c]), hi = std::max(hi, x[(size_t)i * ldx + c]);
      const UniformGroupParams p = uniform_group_params(lo, hi, L.bits);
      const size_t pi = L.param_index(t0 + i0, c);
      store_half(block, L.scales_offset, pi, p.scale_h);
      store_half(block, L.zeros_offset, pi, p.zero_h);
      for (int i = i0; i < i0 + G; ++i) {
        set_code(L, block, t0 + i, c, uniform_code(x[(size_t)i * ldx + c], p.scale, p.zero, qmax));
      }
    }
  }
}

}  // namespace

void quantize_ref(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) {
  if (L.codec == Codec::lloyd_max) return quantize_lloyd_max_ref(L, x, ldx, t0, n, block);
  if (L.axis == GroupAxis::token) return quantize_token_axis_ref(L, x, ldx, t0, n, block);
  quantize_channel_axis_ref(L, x, ldx, t0, n, block);
}

void dequantize_ref(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy) {
  const LloydMaxCodebook* cb = codebook_of(L);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < L.head_dim; ++c) y[(size_t)i * ldy + c] = dequant_one(L, block, cb, t0 + i, c);
  }
}

void dot_ref(const KvBlockLayout& L, const uint8_t* block, const float* q, int t0, int n, float* out) {
  const LloydMaxCodebook* cb = codebook_of(L);
  for (int i = 0; i < n; ++i) {
    double acc = 0;  // double: the reference is the most exact reading of q . x_hat
    for (int c = 0; c < L.head_dim; ++c) acc += (double)q[c] * dequant_one(L, block, cb, t0 + i, c);
    out[i] = (float)acc;
  }
}

void accumulate_ref(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, float* out) {
  const LloydMaxCodebook* cb = codebook_of(L);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < L.head_dim; ++c) out[c] += w[i] * dequant_one(L, block, cb, t0 + i, c);
  }
}

void check_shrink_layouts(const KvBlockLayout& src, const KvBlockLayout& dst) {
  MPKV_CHECK(src.codec == Codec::uniform && dst.codec == Codec::uniform,
             "shrink: only min-max (uniform) codes can be shrunk by the equivalent right shift");
  MPKV_CHECK(src.bits == 2 * dst.bits && (dst.bits == 1 || dst.bits == 2 || dst.bits == 4 || dst.bits == 8),
             "shrink: bits " + std::to_string(src.bits) + " -> " + std::to_string(dst.bits) +
                 " is not a halving among 16 -> 8 -> 4 -> 2 -> 1");
  MPKV_CHECK(src.axis == dst.axis && src.head_dim == dst.head_dim && src.tokens == dst.tokens && src.group == dst.group,
             "shrink: source and destination blocks differ in shape (axis, head_dim, tokens or group)");
  MPKV_CHECK(dst.scale_mult == src.scale_mult * equivalent_shift_scale_factor(dst.bits),
             "shrink: the destination layout's scale_mult must be the source's times 2^b + 1 (use halved_layout)");
}

void shrink_params_ref(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block) {
  // Scales and zeros are kept as stored: dst.scale_mult carries the exact factor (2^b + 1).
  std::memcpy(dst_block + dst.scales_offset, src_block + src.scales_offset, 2 * src.n_params);
  std::memcpy(dst_block + dst.zeros_offset, src_block + src.zeros_offset, 2 * src.n_zeros);
}

void shrink_codes_ref(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block,
                      size_t from, size_t to) {
  const int d = src.head_dim;
  for (size_t k = from; k < to; ++k) {
    const int t = (int)(k / d), c = (int)(k % d);
    set_code(dst, dst_block, t, c, equivalent_shift_code(get_code(src, src_block, t, c), dst.bits));
  }
}

void shrink_ref(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block) {
  shrink_params_ref(src, src_block, dst, dst_block);
  shrink_codes_ref(src, src_block, dst, dst_block, 0, (size_t)src.tokens * src.head_dim);
}

}  // namespace mpkv

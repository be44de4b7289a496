#include "quant/kv_quantizer.h"

#include <cstring>
#include <string>

#include "quant/equivalent_shift.h"
#include "quant/hadamard.h"
#include "util/error.h"

namespace mpkv {

KvQuantizer::KvQuantizer(const QuantOptions& options, const QuantKernels& kernels) : opt_(options), k_(&kernels) {
  validate(opt_);
  codec_ = opt_.method == QuantMethod::turbo ? Codec::lloyd_max : Codec::uniform;
  axis_ = groups_along_tokens(opt_) ? GroupAxis::channel : GroupAxis::token;
  group_ = effective_group(opt_);
  if (opt_.method == QuantMethod::turbo) signs_ = random_signs(opt_.seed, opt_.head_dim);
}

KvBlockLayout KvQuantizer::block_layout(int tokens) const {
  return make_kv_block_layout(codec_, axis_, opt_.bits, opt_.head_dim, tokens, group_);
}

void KvQuantizer::to_code_space(float* v) const {
  const int d = opt_.head_dim;
  if (opt_.method == QuantMethod::turbo) {
    for (int c = 0; c < d; ++c) v[c] *= signs_[(size_t)c];
    fwht_orthonormal(v, d);
  } else if (opt_.method == QuantMethod::rotated) {
    fwht_orthonormal(v, d);
  }
}

void KvQuantizer::from_code_space(float* v) const {
  const int d = opt_.head_dim;
  if (opt_.method == QuantMethod::turbo) {
    fwht_orthonormal(v, d);
    for (int c = 0; c < d; ++c) v[c] *= signs_[(size_t)c];
  } else if (opt_.method == QuantMethod::rotated) {
    fwht_orthonormal(v, d);
  }
}

void KvQuantizer::check_layout(const KvBlockLayout& L) const {
  MPKV_CHECK(L.codec == codec_ && L.axis == axis_ && L.bits == opt_.bits && L.head_dim == opt_.head_dim &&
                 L.group == group_,
             std::string("quantizer ") + method_name(opt_.method) + ": block layout was made for other options");
}

void KvQuantizer::quantize(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) const {
  check_layout(L);
  // Fresh codes get fresh scales: a shrunk layout (scale_mult != 1) is only ever read.
  MPKV_ASSERT(L.scale_mult == 1.0f, "quantize: writing into a shrunk block layout");
  check_token_range(L, t0, n);
  if (!rotates()) return k_->quantize(L, x, ldx, t0, n, block);
  const int d = opt_.head_dim;
  // [n, head_dim] in code space; thread-local so the decode loop (one token per call) does not allocate.
  thread_local std::vector<float> tmp;
  if (tmp.size() < (size_t)n * d) tmp.resize((size_t)n * d);
  for (int i = 0; i < n; ++i) {
    std::memcpy(&tmp[(size_t)i * d], x + (size_t)i * ldx, sizeof(float) * d);
    to_code_space(&tmp[(size_t)i * d]);
  }
  k_->quantize(L, tmp.data(), (size_t)d, t0, n, block);
}

void KvQuantizer::dequantize(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy) const {
  check_layout(L);
  check_token_range(L, t0, n);
  k_->dequantize(L, block, t0, n, y, ldy);
  if (rotates()) {
    for (int i = 0; i < n; ++i) from_code_space(y + (size_t)i * ldy);
  }
}

void KvQuantizer::quantize_dequantize(const float* x, int n, float* out) const {
  if (n == 0) return;
  MPKV_CHECK(n > 0 && n % token_granularity() == 0,
             "quantize_dequantize: " + std::to_string(n) + " tokens is not a multiple of the token group " +
                 std::to_string(token_granularity()));
  const KvBlockLayout L = block_layout(n);
  std::vector<uint8_t> block(L.bytes);
  quantize(L, x, (size_t)opt_.head_dim, 0, n, block.data());
  dequantize(L, block.data(), 0, n, out, (size_t)opt_.head_dim);
}

KvBlockLayout halved_layout(const KvBlockLayout& src) {
  MPKV_CHECK(src.codec == Codec::uniform, "shrink: Lloyd-Max (turbo) codes cannot be halved");
  MPKV_CHECK(src.bits == 16 || src.bits == 8 || src.bits == 4 || src.bits == 2,
             "shrink: " + std::to_string(src.bits) + "-bit codes cannot be halved (ladder 16 -> 8 -> 4 -> 2 -> 1)");
  KvBlockLayout half = make_kv_block_layout(src.codec, src.axis, src.bits / 2, src.head_dim, src.tokens, src.group);
  half.scale_mult = src.scale_mult * equivalent_shift_scale_factor(half.bits);  // exact (kv_block_layout.h)
  return half;
}

void shrink_block(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block,
                  const QuantKernels& kernels) {
  check_shrink_layouts(src, dst);
  kernels.shrink(src, src_block, dst, dst_block);
}

}  // namespace mpkv

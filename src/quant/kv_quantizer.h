// One KV component's quantizer (uniform | kivi | rotated | turbo): options validated once, the
// block layout it writes, and the transform between the model's space and the code space.
//
// Code space: uniform / kivi store x itself; rotated stores H x; turbo stores H D x (H the
// orthonormal Walsh-Hadamard matrix, D random signs). Attention never leaves code space:
//   scores:  q . k_hat = (T q) . (T k)_hat   -> call to_code_space(q) once per query, then dot()
//   output:  sum_i w_i v_hat_i = T^-1 sum_i w_i (T v_i)_hat -> accumulate() in code space, then
//            from_code_space(out) once.
// The kernels (quant_kernels.h) work in code space on a KvBlockLayout; this class adds the
// transform for callers that hold vectors in model space.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/kv_block_layout.h"
#include "quant/quant_kernels.h"
#include "quant/quant_options.h"

namespace mpkv {

class KvQuantizer {
 public:
  // Validates the options (Error with the reason). `kernels` defaults to the active ISA's table.
  explicit KvQuantizer(const QuantOptions& options, const QuantKernels& kernels = quant_kernels());

  const QuantOptions& options() const { return opt_; }
  const QuantKernels& kernels() const { return *k_; }
  Codec codec() const { return codec_; }
  GroupAxis axis() const { return axis_; }
  int group() const { return group_; }
  // Tokens per quantization step: the token group for KIVI keys, 1 otherwise.
  int token_granularity() const { return axis_ == GroupAxis::channel ? group_ : 1; }

  // The layout of a block of `tokens` tokens (Error if tokens is not a multiple of token_granularity()).
  KvBlockLayout block_layout(int tokens) const;

  // True when code space differs from model space (rotated, turbo).
  bool rotates() const { return opt_.method == QuantMethod::rotated || opt_.method == QuantMethod::turbo; }
  // v[head_dim] <- T v (queries, before dot) / T^-1 v (outputs, after accumulate). No-ops when !rotates().
  void to_code_space(float* v) const;
  void from_code_space(float* v) const;

  // x [n, head_dim] in MODEL space (row stride ldx) -> tokens [t0, t0 + n) of the block.
  void quantize(const KvBlockLayout& L, const float* x, size_t ldx, int t0, int n, uint8_t* block) const;
  // tokens [t0, t0 + n) -> y [n, head_dim] in MODEL space (row stride ldy).
  void dequantize(const KvBlockLayout& L, const uint8_t* block, int t0, int n, float* y, size_t ldy) const;
  // x [n, head_dim] -> out [n, head_dim]: quantize into one block of n tokens and back (fake
  // quantization). n must be a multiple of token_granularity().
  void quantize_dequantize(const float* x, int n, float* out) const;

 private:
  void check_layout(const KvBlockLayout& L) const;

  QuantOptions opt_;
  const QuantKernels* k_;
  Codec codec_;
  GroupAxis axis_;
  int group_;
  std::vector<float> signs_;  // turbo's D
};

// The layout of `src` at half the bits (16 -> 8 -> 4 -> 2 -> 1); Error when it cannot be halved.
KvBlockLayout halved_layout(const KvBlockLayout& src);
// Checked equivalent right shift of a whole block (kernels.shrink after check_shrink_layouts).
void shrink_block(const KvBlockLayout& src, const uint8_t* src_block, const KvBlockLayout& dst, uint8_t* dst_block,
                  const QuantKernels& kernels = quant_kernels());

}  // namespace mpkv

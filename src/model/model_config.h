// Model hyperparameters read from GGUF metadata ("<arch>.*" keys).
#pragma once
#include <string>

#include "gguf/gguf_reader.h"
#include "model/kv_cache.h"

namespace mpkv {

enum class Arch { llama, qwen2, qwen3 };

// Which channels RoPE rotates together.
//   adjacent: pairs (2j, 2j+1) — llama GGUFs, whose Q/K rows were permuted at conversion;
//   neox:     pairs (j, j + d/2) — qwen2, qwen3.
enum class RopeStyle { adjacent, neox };

struct ModelConfig {
  Arch arch = Arch::llama;
  std::string arch_name;
  std::string name;         // general.name
  int n_layer = 0;
  int d_model = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;         // per head, for both keys and values
  int d_ffn = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;      // <arch>.context_length
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;  // linear RoPE scaling: position ids are divided by this
  int rope_dim = 0;         // channels rotated per head (== head_dim for supported models)
  RopeStyle rope_style = RopeStyle::adjacent;
  bool qkv_bias = false;    // qwen2
  bool qk_norm = false;     // qwen3: RMSNorm over each head of q and k before RoPE

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  // The shapes a KV cache for this model is built with.
  KvDims kv_dims() const { return {n_layer, n_head, n_head_kv, head_dim}; }
  int group_size() const { return n_head / n_head_kv; }  // query heads per KV head

  // Reads and validates; throws Error naming the architecture or key when unsupported/missing.
  static ModelConfig from_gguf(const GgufReader& gguf);
  std::string describe() const;
};

const char* arch_name(Arch a);

}  // namespace mpkv

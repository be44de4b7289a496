// Model hyperparameters read from GGUF metadata ("<arch>.*" keys).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "model/kv_cache.h"

namespace mpkv {

enum class Arch { llama, qwen2, qwen3, gemma3, phi3 };

// Which channels RoPE rotates together.
//   adjacent: pairs (2j, 2j+1) — llama GGUFs, whose Q/K rows were permuted at conversion;
//   neox:     pairs (j, j + d/2) — qwen2, qwen3, gemma3, phi3.
enum class RopeStyle { adjacent, neox };

// `<arch>.rope.scaling.type` values (docs/models.md, "RoPE"):
//   none:     positions as they are, whatever the factor says;
//   linear:   positions divided by the factor (rope_scale);
//   yarn:     per pair a mix of the divided (interpolated) and undivided (extrapolated) angle, with
//             cos / sin scaled up (RopeYarn);
//   longrope: as linear for the positions (llama.cpp gives this type nothing of its own); what makes
//             phi3's longrope are its factor tensors (Longrope), read whatever the type says.
enum class RopeScaling { none, linear, yarn, longrope };

// phi3's longrope factor tensors, [rope_dim / 2] divisors of the pairs' frequencies: which one RoPE
// uses (docs/models.md, "Longrope"). llama.cpp's rule: rope_factors_long.weight when the context per
// sequence exceeds the original (pre-extension) training context, rope_factors_short.weight otherwise.
//   none:  the file has neither tensor (every architecture but phi3, and phi3 files without them).
enum class LongropeFactors { none, short_factors, long_factors };

// The longrope choice and what it was made from, for the forward pass and for `mpkv info` / the
// startup log to say.
struct Longrope {
  LongropeFactors factors = LongropeFactors::none;
  int n_ctx = 0;             // the per-sequence context the model runs with
  bool n_ctx_given = false;  // false: none was given and context_length stood in (llama.cpp's n_ctx 0)
  int64_t n_ctx_compared = 0;  // n_ctx rounded up to a multiple of 256, as llama.cpp compares it
  int n_ctx_orig = 0;        // `rope.scaling.original_context_length` (absent: context_length)
};

// YaRN as llama.cpp derives it for these architectures (docs/models.md, "YaRN"): it reads none of
// the file's `rope.scaling.yarn_*` keys, so ext_factor is 1, beta_fast 32, beta_slow 1, and the
// original context is `rope.scaling.original_context_length` (absent: context_length).
struct RopeYarn {
  float ext_factor = 0.0f;  // 0: no YaRN (every scaling type but yarn)
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;
};

// The activation of the gated feed-forward: down(act(gate(x)) * up(x)).
//   silu:      SwiGLU (llama, qwen)
//   gelu_tanh: GeGLU with the tanh approximation of GELU (gemma3, as llama.cpp computes it)
enum class FfnActivation { silu, gelu_tanh };

// What differs between one layer's attention and another's (gemma3: sliding-window layers have
// their own RoPE base; docs/gemma3.md).
struct LayerAttention {
  int window = 0;              // sliding window W (KvDims::window); 0 = global
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;     // linear RoPE scaling: position ids are divided by this
};

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
  RopeScaling rope_scaling = RopeScaling::linear;  // llama.cpp's default when the key is absent
  float rope_scale = 1.0f;  // linear / yarn RoPE scaling factor: position ids are divided by this
  RopeYarn rope_yarn;       // ext_factor 0 unless rope_scaling is yarn
  // The attn_factor llama.cpp passes to ggml_rope_ext (its cparams.yarn_attn_factor): RoPE's cos
  // and sin are multiplied by it (docs/models.md, "RoPE"). `rope.scaling.attn_factor`, times YaRN's
  // own correction.
  float rope_attn_factor = 1.0f;
  Longrope longrope;        // phi3 with rope_factors_long / rope_factors_short.weight; else none
  int rope_dim = 0;         // channels rotated per head (== head_dim for supported models)
  RopeStyle rope_style = RopeStyle::adjacent;
  bool qkv_bias = false;    // qwen2
  bool qk_norm = false;     // qwen3, gemma3: RMSNorm over each head of q and k before RoPE
  // `<arch>.attention.sliding_window` of a llama or phi3 file, which llama.cpp does not apply to
  // these architectures (docs/models.md, "Sliding window"): every layer stays global; kept to say so.
  int unapplied_sliding_window = 0;
  // gemma3 (all neutral for llama / qwen):
  float embd_scale = 1.0f;  // token embeddings are multiplied by this (gemma3: sqrt(d_model))
  FfnActivation ffn_act = FfnActivation::silu;
  bool post_norms = false;  // RMSNorm of the attention and FFN outputs before each residual add
  // Queries are multiplied by this before attention; the caches scale scores by 1/sqrt(head_dim),
  // so the model's softmax scale is query_scale / sqrt(head_dim). 1 but for gemma3 27B.
  float query_scale = 1.0f;
  float final_softcap = 0.0f;  // > 0: logits = cap * tanh(logits / cap)
  std::vector<LayerAttention> layer_attn;  // [n_layer]; global layers use rope_base / rope_scale

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  // The shapes a KV cache for this model is built with.
  KvDims kv_dims() const;
  const LayerAttention& attn(int layer) const { return layer_attn[layer]; }
  int group_size() const { return n_head / n_head_kv; }  // query heads per KV head

  // Reads and validates; throws Error naming the architecture or key when unsupported/missing.
  // n_ctx: the context per sequence the model will run with (prompt + generated tokens, or a
  // perplexity window), which chooses phi3's longrope factors; 0 when the caller runs no context
  // (`mpkv info` without -c), which stands for context_length as llama.cpp's n_ctx 0 does.
  static ModelConfig from_gguf(const GgufReader& gguf, int n_ctx);
  std::string describe() const;
  // One line saying which longrope factors were chosen and why; empty without longrope factors.
  std::string longrope_choice() const;
};

const char* arch_name(Arch a);
const char* rope_scaling_name(RopeScaling s);
// The tensor name of a longrope choice ("rope_factors_short.weight"); "none" for none.
const char* longrope_tensor_name(LongropeFactors f);

}  // namespace mpkv

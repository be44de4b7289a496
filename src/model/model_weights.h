// Views of a model's tensors inside the mapped GGUF file (weights stay in their GGUF encoding).
#pragma once
#include <memory>
#include <vector>

#include "gguf/gguf_reader.h"
#include "matvec/matvec.h"
#include "model/model_config.h"

namespace mpkv {

// A 1-D float32 vector held in the file (norm weights, biases); F32 only. Norm weights are used as
// stored: llama.cpp's converter already adds Gemma's +1 to them (docs/gemma3.md).
struct VectorWeight {
  const float* data = nullptr;
  int64_t n = 0;
};

struct LayerWeights {
  VectorWeight attn_norm;                 // [d_model]
  WeightMatrix wq, wk, wv, wo;            // [q_dim, d], [kv_dim, d], [kv_dim, d], [d, q_dim] (rows x cols)
  VectorWeight bq, bk, bv;                // qwen2 only: [q_dim], [kv_dim], [kv_dim]
  VectorWeight q_norm, k_norm;            // qwen3, gemma3: [head_dim]
  VectorWeight attn_post_norm;            // gemma3 only: [d_model], on the attention output
  VectorWeight ffn_norm;                  // [d_model]
  WeightMatrix w_gate, w_up, w_down;      // [ffn, d], [ffn, d], [d, ffn]
  VectorWeight ffn_post_norm;             // gemma3 only: [d_model], on the FFN output
};

struct ModelWeights {
  WeightMatrix token_embd;                // [n_vocab, d_model]; rows are embeddings
  VectorWeight output_norm;               // [d_model]
  WeightMatrix output;                    // [n_vocab, d_model]; == token_embd when tied
  bool tied_output = false;
  // The [rope_dim / 2] per-pair divisors of the RoPE frequencies that the forward pass applies
  // (docs/models.md, "RoPE"): llama's rope_freqs.weight (Llama 3.1+ long-context scaling), or the
  // phi3 longrope tensor that ModelConfig::longrope chose for the context; data null when none.
  VectorWeight rope_freqs;
  std::vector<LayerWeights> layers;
  // Owners of the matrices' packed copies (WeightMatrix::packed, matvec_packed.h), made at load
  // for the types that have a packed layout; shared by copies of this struct.
  std::vector<std::shared_ptr<const PackedMatrix>> packed_store;

  // Looks up and shape-checks every tensor the architecture needs; throws Error naming the first
  // missing tensor, wrong shape or unsupported tensor type, and then the first tensor of the file
  // that mpkv does not use (running without it would compute something else: docs/models.md,
  // "Tensors").
  static ModelWeights from_gguf(const GgufReader& gguf, const ModelConfig& config);

  // Repacks every layer matrix and the output head whose type has a packed layout.
  void pack_matrices();
};

}  // namespace mpkv

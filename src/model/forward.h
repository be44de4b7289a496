// The transformer forward pass over a batch of tokens from one or more sequences.
//
// A batch lists tokens with their sequence id and position. Tokens of one sequence must be
// contiguous in the batch and in increasing position order, continuing what the KV cache already
// holds for that sequence (prefill = many tokens of one sequence; decode = one token each of
// several sequences). K/V go to the KvCache, which also computes attention.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"

namespace mpkv {

struct BatchToken {
  int32_t token = 0;
  int pos = 0;
  int seq = 0;
  bool logits = false;  // compute next-token logits for this entry
};

// Optional observer of each layer's post-RoPE keys and values (calibration, distortion fits):
// k, v: [n, n_head_kv, head_dim] for the batch's tokens, in batch order.
using KvObserver = std::function<void(int layer, int n, const float* k, const float* v)>;

class Forward {
 public:
  explicit Forward(const Model& model);

  // Runs the batch; logits_out becomes [n_with_logits, n_vocab] (rows in batch order).
  void run(KvCache& cache, const std::vector<BatchToken>& batch, std::vector<float>& logits_out);

  // Calibration hooks: RoPE positions multiplied by pos_scale (positional interpolation) and an
  // observer of K/V. Defaults: 1 and none.
  void set_pos_scale(float s) { pos_scale_ = s; }
  void set_kv_observer(KvObserver obs) { observer_ = std::move(obs); }
  // Key smoothing from a plan (SmoothAttention, the folding of calib/smoothing.h): per layer a
  // lambda per KV channel, [n_layer][n_head_kv * head_dim]; queries are multiplied and keys divided
  // by it right after their projections (and biases / QK norms), before RoPE. An empty vector, or
  // an empty layer entry, means no smoothing. Throws Error on a shape mismatch.
  void set_qk_smoothing(std::vector<std::vector<float>> lambda);

 private:
  // x_ += attention(x_) and x_ += ffn(x_) of one layer (with the gemma3 post-norms when set).
  void attention_block(KvCache& cache, const std::vector<BatchToken>& batch, int layer);
  void ffn_block(int layer, int n);
  // q [n, n_head, hd] *= lambda of its KV head's channels; k [n, n_head_kv, hd] /= lambda.
  void apply_qk_smoothing(int layer, int n);
  // Appends every sequence's K/V of the batch, then one attention call for the whole batch: attn_.
  void append_and_attend(KvCache& cache, const std::vector<BatchToken>& batch, int layer);

  const Model& model_;
  float pos_scale_ = 1.0f;
  KvObserver observer_;
  std::vector<std::vector<float>> qk_lambda_;
  // Activations, row-major [n, width]:
  std::vector<float> x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_;
  std::vector<int> pos_;
  std::vector<AttendSpan> spans_;
};

// Sets the OpenMP thread count (n <= 0: one per hardware thread).
void set_num_threads(int n);
int default_num_threads();

}  // namespace mpkv

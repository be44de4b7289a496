// Key smoothing (QServe's SmoothAttention, calibrated with positional interpolation as in PM-KVQ;
// docs/algorithms.md §5).
//
// Per layer and KV channel i (i over [n_head_kv, head_dim]): lambda_i = (max_m |K_{m,i}|)^alpha,
// with the maximum taken over post-RoPE calibration keys and made equal on the two channels of
// each RoPE pair (the max of the pair): pairs (2j, 2j+1) for llama GGUFs, (j, j + d/2) for NEOX
// (qwen2, qwen3). Queries are multiplied by lambda and keys divided by it: per head
// (lambda q) . (k / lambda) = q . k, so attention is unchanged while key outliers move into the
// queries and the keys quantize better.
//
// Folding. The paper folds lambda into the weights: W_q rows *= lambda, W_k rows /= lambda, and the
// same for b_q, b_k. Here the weights stay in their GGUF encodings (re-quantizing them would change
// the model), so the runtime applies the same scales to q and k right after their projections
// (after the bias, which folding scales too: (W x + b) * lambda = (lambda W) x + lambda b), i.e.
// apply_smoothing() between the projection and RoPE. For qwen3 the scales go after the per-head
// QK RMSNorm (a row scaling of W_k would be normalised away; folding goes into the q_norm / k_norm
// weights, which is again a per-channel scaling after the norm). Because lambda is equal on the two
// channels a RoPE pair rotates, scaling commutes with the rotation: before or after RoPE is the same.
//
// alpha is chosen per layer from 1.0, 0.95, ..., 0.05, 0 (0 = no smoothing) by the lowest mean squared error of the
// attention output when keys (smoothed) and values go through the target quantizer (default
// per-token uniform K4V4, round to nearest; `mpkv calibrate` scores at the plan's bits), against
// unquantized attention. The attention is the runtime's: a sliding-window layer's queries see only
// their window, and with SmoothingSearchOptions::quantized_pairs (calib::QuantizedPairs, what the
// plan's cache quantizes) only those (query, key) pairs read quantized keys and values; the fp16
// sink and window read exact ones (docs/calibration.md, "What the runtime quantizes").
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "calib/activation_backward.h"
#include "model/model_config.h"
#include "quant/quant_options.h"

namespace mpkv::calib {

// Running max |K| per (layer, KV channel) over post-RoPE keys.
struct KeyMaxima {
  int n_layer = 0, n_head_kv = 0, head_dim = 0;
  std::vector<std::vector<float>> max_abs;  // [layer][n_head_kv * head_dim]
  int64_t tokens_seen = 0;                  // per layer

  static KeyMaxima for_model(const ModelConfig& c);
  // k: [n, n_head_kv, head_dim] of `layer`.
  void observe(int layer, int n, const float* k);
};

// lambda [n_head_kv * head_dim] from one layer's maxima: (max over the RoPE pair)^alpha, the max
// clamped below at kMinKeyMax so lambda stays finite and positive for dead channels.
inline constexpr float kMinKeyMax = 1e-4f;
std::vector<float> pair_lambda(const float* max_abs, int n_head_kv, int head_dim, RopeStyle style, double alpha);

// The grid 1.0, 0.95, ..., 0.05, 0 (21 values; alpha 0 gives lambda = 1: "no smoothing" competes).
std::vector<double> default_alpha_grid();

struct SmoothingScales {
  int n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  RopeStyle rope_style = RopeStyle::adjacent;
  std::vector<double> alpha;               // [layer]
  std::vector<std::vector<float>> lambda;  // [layer][n_head_kv * head_dim]; empty = no smoothing
  bool empty() const { return lambda.empty(); }
};

// q [n, n_head, head_dim] *= lambda of the query head's KV head; k [n, n_head_kv, head_dim] /=
// lambda. Call right after the projections (+ biases, + QK norm) and before RoPE (see above).
// Nothing happens when s is empty. Error when the layer or the shapes do not match s.
void apply_smoothing(const SmoothingScales& s, int layer, int n, float* q, float* k);

// One sequence's post-RoPE, unsmoothed q [T, n_head, head_dim], k and v [T, n_head_kv, head_dim]
// for one layer.
struct AttentionSample {
  int n_tokens = 0;
  std::vector<float> q, k, v;
};

struct SmoothingSearchOptions {
  QuantOptions key{QuantMethod::uniform, KvRole::key, 4};
  QuantOptions value{QuantMethod::uniform, KvRole::value, 4};
  std::vector<double> alphas = default_alpha_grid();
  // Queries scored: t = T-1, T-1-stride, ... (each attends to all its keys). The MSE is an average,
  // so a subsample estimates it; the stride keeps the search at a few percent of calibration time.
  int query_stride = 16;
  // What the runtime quantizes: query t reads quantized keys and values at [k0, k1) of
  // quantized_pairs(layer, t, k0, k1) and exact ones elsewhere; rows are quantized from
  // first_quantized (the sink) on, token groups aligned there as the cache aligns its pages.
  // Unset: every pair reads quantized keys and values (the papers' harness, `--all-pairs`).
  QuantizedKeyRange quantized_pairs;
  int first_quantized = 0;
};

struct LayerAlphaSearch {
  double alpha = 0;            // the chosen one
  std::vector<double> mse;     // per alpha in the grid order
  double mse_unsmoothed = 0;   // the same quantizers without smoothing (for the report)
};

// Attention-output MSE of one layer's samples under the quantizers: keys quantized as
// lambda * Q(k / lambda) (lambda nullptr = no smoothing), values as Q(v), read where the runtime
// reads them quantized (o.quantized_pairs); mean over scored queries, heads and channels.
// Single-threaded (callers parallelise over alphas). `layer` picks the sliding window and the pairs.
double attention_output_mse(const ModelConfig& c, int layer, const std::vector<AttentionSample>& samples,
                            const float* lambda, const SmoothingSearchOptions& o);

// Scores every alpha of the grid (in parallel) and picks the lowest MSE (ties: the larger alpha).
LayerAlphaSearch search_layer_alpha(const ModelConfig& c, int layer, const std::vector<AttentionSample>& samples,
                                    const float* max_abs, const SmoothingSearchOptions& o);

void to_json(nlohmann::json& j, const SmoothingScales& s);
void from_json(const nlohmann::json& j, SmoothingScales& s);
void to_json(nlohmann::json& j, const LayerAlphaSearch& r);

}  // namespace mpkv::calib

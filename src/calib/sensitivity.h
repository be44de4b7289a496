// Sensitivities of the loss to KV quantization, from activation gradients (docs/algorithms.md §4, §6).
//
// PM-KVQ (first-order Taylor), per (layer, KV head) and role, for each bit-width b:
//   s_K(b) = || G_K (.) (K - Q_b(K)) ||_1      s_V(b) likewise
// summed over the sequence's tokens and channels, averaged over sequences; the block sensitivity
// of PM-KVQ is s_K + s_V summed over the heads of a layer (per-layer blocks) or per head.
// RateQuant, per (layer, KV head, K|V):
//   w = E_seq[ (1/T) sum_t || G_{l,h,t} ||^2 ]
//
// With smoothing, keys are stored (and quantized) as K' = K / lambda, so the key error is
// K - lambda Q_b(K / lambda), and the RateQuant gradient is the one wrt the stored K':
// G_K' = lambda G_K (the distortion model D(b) describes the error on K').
// Quantizers come from src/quant (KvQuantizer::quantize_dequantize over one head's rows
// [first_quantized, T), token groups aligned there as the cache aligns its pages after the sink);
// tokens before it (the fp16 sink) and past the last whole token group (KIVI keys) count as
// unquantized.
//
// What the runtime quantizes (docs/calibration.md): when the gradients carry dk_q / dv_q
// (ActivationBackward::set_quantized_pairs with calib::QuantizedPairs), G is the gradient through
// the quantized (query, key) pairs only, so pairs inside the fp16 window and the sink add nothing.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "calib/activation_backward.h"
#include "calib/smoothing.h"
#include "model/model_config.h"
#include "quant/quant_options.h"

namespace mpkv::calib {

struct SensitivityOptions {
  QuantOptions key{QuantMethod::uniform, KvRole::key, 4};      // bits ignored: see `bits`
  QuantOptions value{QuantMethod::uniform, KvRole::value, 4};
  std::vector<int> bits{2, 3, 4, 8};                           // candidate bit-widths b
  int first_quantized = 0;  // the plan's sink: positions before it are fp16
};

struct SensitivityReport {
  int n_layer = 0, n_head_kv = 0, head_dim = 0;
  int n_samples = 0;
  std::vector<int> bits;
  QuantOptions key, value;
  bool smoothed = false;
  int first_quantized = 0;       // positions before it were left out (the sink)
  bool quantized_pairs = false;  // G restricted to the runtime's quantized (query, key) pairs
  // PM-KVQ s(b): [layer][kv head][bit index], mean over samples of the L1 sums above.
  std::vector<std::vector<std::vector<double>>> pmkvq_key, pmkvq_value;
  // RateQuant w: [layer][kv head].
  std::vector<std::vector<double>> w_key, w_value;

  // PM-KVQ's per-layer block sensitivity s_{l,b}: sum over heads of key + value.
  double pmkvq_layer(int layer, int bit_index) const;
};

class SensitivityAccumulator {
 public:
  // Validates the quantizers at every candidate bit-width (Error naming the bad one). smoothing:
  // optional, must match the model's shape.
  SensitivityAccumulator(const ModelConfig& c, const SensitivityOptions& o, const SmoothingScales* smoothing = nullptr);

  // One sequence's K, V, dK, dV. Parallel over (layer, head) with OpenMP.
  void add(const KvGradients<float>& g);

  // The means so far (Error when nothing was added).
  SensitivityReport report() const;

 private:
  ModelConfig c_;
  SensitivityOptions o_;
  const SmoothingScales* smoothing_;
  int n_samples_ = 0;
  bool pairs_ = false;
  // Sums over samples: [layer][head][bit] and [layer][head].
  std::vector<std::vector<std::vector<double>>> sk_, sv_;
  std::vector<std::vector<double>> wk_, wv_;
};

void to_json(nlohmann::json& j, const SensitivityReport& r);

}  // namespace mpkv::calib

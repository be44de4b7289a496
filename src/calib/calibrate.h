// The calibration pass behind `mpkv calibrate`, up to (not including) the allocators:
//   1. key maxima: forward over every calibration window at RoPE positions t * pi_scale, max |K|
//      per (layer, KV channel); the first `alpha_samples` windows also keep q, k, v per layer;
//   2. alpha search per layer (smoothing.h) -> SmoothingScales; with a runtime plan, scored on the
//      (query, key) pairs its cache quantizes (the sink and fp16 window read exact keys);
//   3. gradients: forward + backward over every window (positions t * gradient_pos_scale), feeding
//      the sensitivity accumulator (with the smoothing of step 2, so key errors are those of the
//      keys as they will be stored). With a runtime plan, only what its cache quantizes counts:
//      positions from the sink on, gradients through the quantized (query, key) pairs
//      (quantized_pairs.h).
// Returns a report (JSON-serialisable) with per-phase wall times. The quantizer options' head_dim
// is taken from the model. Every option is validated before any pass starts.
#pragma once
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calib/activation_backward.h"
#include "calib/calibration_data.h"
#include "calib/sensitivity.h"
#include "calib/smoothing.h"
#include "kvcache/kv_plan.h"
#include "model/model.h"

namespace mpkv::calib {

struct CalibrationOptions {
  SensitivityOptions sensitivity;
  SmoothingSearchOptions smoothing;
  bool smooth = true;               // false: skip steps 1-2 (no smoothing scales)
  int alpha_samples = 4;            // windows whose q/k/v the alpha search scores
  double gradient_pos_scale = 1.0;  // RoPE position scale of the gradient pass
  bool progress = true;             // progress bars on stderr
  // The plan shape the sensitivities are for (sink, window, quantizer granularity); nullopt: every
  // position and pair counts (the papers' harness).
  std::optional<KvPlan> runtime;
};

struct CalibrationTimings {
  double weights_s = 0;       // dequantizing the model into float matrices
  double key_maxima_s = 0;    // step 1
  double alpha_search_s = 0;  // step 2
  double gradients_s = 0;     // step 3, sensitivities included
  double total_s = 0;
  double cpu_s = 0;           // process CPU time over the whole call (all threads): on a shared
                              // machine, cpu_s / threads is what the wall time would be alone
};

struct CalibrationReport {
  std::string model_name, arch;
  int n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  CalibrationDataOptions data;
  size_t text_tokens = 0;
  double gradient_pos_scale = 1.0;
  double mean_loss = 0;                     // gradient pass, mean over windows
  KeyMaxima key_maxima;                     // empty when !smooth
  SmoothingScales smoothing;                // empty when !smooth
  std::vector<LayerAlphaSearch> alpha_search;
  SensitivityReport sensitivity;
  CalibrationTimings timings;
};

// Max |post-RoPE key| per (layer, KV channel) over the windows at positions t * pos_scale.
// keep: when non-null, (*keep)[layer] receives q/k/v of the first keep_samples windows.
// done(w) is called after each window (progress).
KeyMaxima collect_key_maxima(ActivationBackward<float>& ab, const std::vector<std::vector<int32_t>>& windows,
                             double pos_scale, int keep_samples = 0,
                             std::vector<std::vector<AttentionSample>>* keep = nullptr,
                             const std::function<void(size_t)>& done = {});

CalibrationReport run_calibration(const Model& model, const CalibrationData& data, const CalibrationOptions& o);

void to_json(nlohmann::json& j, const CalibrationTimings& t);
void to_json(nlohmann::json& j, const CalibrationReport& r);

}  // namespace mpkv::calib

// RateQuant's distortion model per component (docs/calibration.md, "Distortion fits"): for every
// (layer, KV head, K|V), the MSE of the quantizer on that component's own keys or values (as the
// cache stores them: smoothed keys, the sink left out) at every width the quantizer supports in
// [1, 8] (supported_distortion_bits, quant/distortion.h), and the fit D(b) = alpha * beta^-b by
// least squares on ln MSE with its R^2. A component whose MSE is zero at some width (a dead head)
// takes the pooled fit (mean MSE over components).
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "calib/kv_collector.h"
#include "quant/distortion.h"
#include "quant/quant_options.h"

namespace mpkv::calib {

struct ComponentFits {
  std::vector<int> bits;                                         // widths measured and fitted
  std::vector<std::vector<ExponentialFit>> key, value;           // [layer][head]
  std::vector<std::vector<std::vector<double>>> mse_key, mse_value;  // [layer][head][bit index]
  ExponentialFit pooled_key, pooled_value;                       // fit of the mean MSE per width
  bool empty() const { return key.empty(); }
  // Smallest and mean R^2 over the per-component fits.
  double min_r2() const;
  double mean_r2() const;
};

// Error when kv has fewer vectors than one token group, or bits is invalid for the quantizer.
ComponentFits fit_components(const KvSamples& kv, QuantMethod q, const std::vector<int>& bits);

void to_json(nlohmann::json& j, const ComponentFits& f);
void from_json(const nlohmann::json& j, ComponentFits& f);

}  // namespace mpkv::calib

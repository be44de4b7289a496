// Measured distortion curves D(b) of a quantizer on sample vectors, and RateQuant's exponential
// model D(b) = alpha * beta^-b fitted by least squares on ln D (docs/algorithms.md §6, §8).
// Library code: `mpkv distortion` feeds it the real keys / values of one (layer, KV head).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quant/quant_options.h"

namespace mpkv {

struct ExponentialFit {
  double alpha = 0;  // D(0)
  double beta = 0;   // distortion ratio per bit (4 = 6.02 dB/bit, the Gaussian rate-distortion slope)
  double r2 = 0;     // coefficient of determination of the fit on ln D
};

// Least squares of ln mse[i] = ln alpha - bits[i] ln beta. Error unless there are >= 2 points,
// two distinct bit-widths, sizes match and every mse is finite and > 0.
ExponentialFit fit_exponential(const std::vector<int>& bits, const std::vector<double>& mse);

struct DistortionCurve {
  std::string method;       // method_name()
  std::string role;         // role_name()
  int head_dim = 0;
  int group = 0;            // effective group
  int n_vectors = 0;        // vectors measured (KIVI keys: rounded down to whole token groups)
  double variance = 0;      // mean per-element variance about each channel's mean
  std::vector<int> bits;
  std::vector<double> mse;  // mean over elements of (x - x_hat)^2, model space
  ExponentialFit fit;
  // The Gaussian distortion-rate bound at b bits for this variance: variance * 4^-b.
  double gaussian_bound(int b) const;
};

// The widths in [1, 8] the quantizer supports, all measured and fitted: min-max codes {1, 2, 3, 4, 8},
// turbo {1, 2, 3, 4} (`mpkv distortion`, calibration's per-component fits).
std::vector<int> supported_distortion_bits(QuantMethod m);

// x: [n, head_dim] samples (keys or values of one layer / KV head), row-major. For each b in
// `bits`, quantizes with `base` at b bits (base.bits is ignored) and measures the MSE; then fits.
// Validates every option set before measuring anything. Error when fewer than one token group of
// vectors is given. The fit is left zero when some MSE is 0 (constant rows).
DistortionCurve measure_distortion(const QuantOptions& base, const float* x, int n, const std::vector<int>& bits);

// measure_distortion for every method that applies to this head_dim (rotated and turbo need a
// power of two and are left out otherwise), each at its supported bit-widths and default group.
// What `mpkv distortion` runs per (layer, KV head, K|V).
std::vector<DistortionCurve> measure_distortion_all_methods(const float* x, int n, int head_dim, KvRole role);

void to_json(nlohmann::json& j, const ExponentialFit& f);
void from_json(const nlohmann::json& j, ExponentialFit& f);
void to_json(nlohmann::json& j, const DistortionCurve& c);
void from_json(const nlohmann::json& j, DistortionCurve& c);

}  // namespace mpkv

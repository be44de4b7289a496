#include "quant/distortion.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "quant/kv_quantizer.h"
#include "util/error.h"

namespace mpkv {

ExponentialFit fit_exponential(const std::vector<int>& bits, const std::vector<double>& mse) {
  MPKV_CHECK(bits.size() == mse.size(), "distortion fit: " + std::to_string(bits.size()) + " bit-widths but " +
                                            std::to_string(mse.size()) + " MSE values");
  MPKV_CHECK(std::set<int>(bits.begin(), bits.end()).size() >= 2,
             "distortion fit: needs at least two distinct bit-widths");
  const size_t n = bits.size();
  std::vector<double> y(n);
  double mb = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    MPKV_CHECK(std::isfinite(mse[i]) && mse[i] > 0,
               "distortion fit: MSE at " + std::to_string(bits[i]) + " bits is " + std::to_string(mse[i]) +
                   " (must be finite and > 0 to take its log)");
    y[i] = std::log(mse[i]);
    mb += bits[i];
    my += y[i];
  }
  mb /= (double)n;
  my /= (double)n;
  double sbb = 0, sby = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sbb += (bits[i] - mb) * (bits[i] - mb);
    sby += (bits[i] - mb) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  const double slope = sby / sbb, intercept = my - slope * mb;
  double ss_res = 0;
  for (size_t i = 0; i < n; ++i) {
    const double r = y[i] - (intercept + slope * bits[i]);
    ss_res += r * r;
  }
  ExponentialFit f;
  f.alpha = std::exp(intercept);
  f.beta = std::exp(-slope);
  f.r2 = syy > 0 ? 1.0 - ss_res / syy : 1.0;
  return f;
}

double DistortionCurve::gaussian_bound(int b) const { return variance * std::pow(4.0, -b); }

std::vector<int> supported_distortion_bits(QuantMethod m) {
  std::vector<int> out;
  for (int b = 1; b <= 8; ++b) {
    try {
      validate(QuantOptions{m, KvRole::key, b, 64, 0});
      out.push_back(b);
    } catch (const Error&) {  // a width this quantizer does not have
    }
  }
  return out;
}

DistortionCurve measure_distortion(const QuantOptions& base, const float* x, int n, const std::vector<int>& bits) {
  MPKV_CHECK(!bits.empty(), "distortion: no bit-widths to measure");
  std::vector<KvQuantizer> qs;
  for (int b : bits) {
    QuantOptions o = base;
    o.bits = b;
    qs.emplace_back(o);  // validates (Error before any work)
  }
  const int d = base.head_dim;
  const int gran = qs.front().token_granularity();
  const int m = n / gran * gran;
  MPKV_CHECK(m > 0, "distortion: " + std::to_string(n) + " vectors is less than one token group of " +
                        std::to_string(gran));
  DistortionCurve c;
  c.method = method_name(base.method);
  c.role = role_name(base.role);
  c.head_dim = d;
  c.group = qs.front().group();
  c.n_vectors = m;
  c.bits = bits;
  // variance: mean over channels of the variance about the channel mean.
  double var = 0;
  for (int ch = 0; ch < d; ++ch) {
    double s = 0, ss = 0;
    for (int i = 0; i < m; ++i) s += x[(size_t)i * d + ch];
    const double mean = s / m;
    for (int i = 0; i < m; ++i) ss += (x[(size_t)i * d + ch] - mean) * (x[(size_t)i * d + ch] - mean);
    var += ss / m;
  }
  c.variance = var / d;
  std::vector<float> out((size_t)m * d);
  for (const KvQuantizer& q : qs) {
    q.quantize_dequantize(x, m, out.data());
    double se = 0;
    for (size_t i = 0; i < out.size(); ++i) se += ((double)x[i] - out[i]) * ((double)x[i] - out[i]);
    c.mse.push_back(se / (double)out.size());
  }
  // A dead component (constant rows: every width exact) has no ln D to fit; its fit stays zero.
  const bool positive = std::all_of(c.mse.begin(), c.mse.end(), [](double e) { return e > 0; });
  if (positive && std::set<int>(bits.begin(), bits.end()).size() >= 2) c.fit = fit_exponential(c.bits, c.mse);
  return c;
}

std::vector<DistortionCurve> measure_distortion_all_methods(const float* x, int n, int head_dim, KvRole role) {
  std::vector<DistortionCurve> out;
  const bool pow2 = head_dim > 0 && (head_dim & (head_dim - 1)) == 0;
  for (QuantMethod m : {QuantMethod::uniform, QuantMethod::kivi, QuantMethod::rotated, QuantMethod::turbo}) {
    if ((m == QuantMethod::rotated || m == QuantMethod::turbo) && !pow2) continue;
    const std::vector<int> bits = supported_distortion_bits(m);
    out.push_back(measure_distortion(QuantOptions{m, role, bits.front(), head_dim, 0}, x, n, bits));
  }
  return out;
}

void to_json(nlohmann::json& j, const ExponentialFit& f) { j = {{"alpha", f.alpha}, {"beta", f.beta}, {"r2", f.r2}}; }
void from_json(const nlohmann::json& j, ExponentialFit& f) {
  f.alpha = j.at("alpha").get<double>();
  f.beta = j.at("beta").get<double>();
  f.r2 = j.at("r2").get<double>();
}

void to_json(nlohmann::json& j, const DistortionCurve& c) {
  j = {{"method", c.method}, {"role", c.role},   {"head_dim", c.head_dim}, {"group", c.group},
       {"n_vectors", c.n_vectors}, {"variance", c.variance}, {"bits", c.bits}, {"mse", c.mse},
       {"fit", c.fit}};
}
void from_json(const nlohmann::json& j, DistortionCurve& c) {
  c.method = j.at("method").get<std::string>();
  c.role = j.at("role").get<std::string>();
  c.head_dim = j.at("head_dim").get<int>();
  c.group = j.at("group").get<int>();
  c.n_vectors = j.at("n_vectors").get<int>();
  c.variance = j.at("variance").get<double>();
  c.bits = j.at("bits").get<std::vector<int>>();
  c.mse = j.at("mse").get<std::vector<double>>();
  c.fit = j.at("fit").get<ExponentialFit>();
  MPKV_CHECK(c.bits.size() == c.mse.size(), "distortion curve JSON: 'bits' and 'mse' differ in length");
}

}  // namespace mpkv

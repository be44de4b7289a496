#include "calib/distortion_fits.h"

#include <algorithm>

#include "util/error.h"

namespace mpkv::calib {

namespace {

bool all_positive(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return x > 0; });
}

// One role: MSE per component, the pooled fit, then each component's fit (pooled when degenerate).
void fit_role(const KvSamples& kv, QuantMethod q, KvRole role, const std::vector<int>& bits,
              std::vector<std::vector<ExponentialFit>>& fits, std::vector<std::vector<std::vector<double>>>& mse,
              ExponentialFit& pooled) {
  const int L = kv.n_layer, H = kv.n_head_kv, hd = kv.head_dim;
  mse.assign(L, std::vector<std::vector<double>>(H));
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      const std::vector<float>& x = role == KvRole::key ? kv.key(l, h) : kv.value(l, h);
      mse[l][h] = measure_distortion({q, role, bits.front(), hd, 0}, x.data(), (int)(x.size() / hd), bits).mse;
    }
  std::vector<double> mean(bits.size(), 0.0);
  for (const auto& layer : mse)
    for (const auto& m : layer)
      for (size_t i = 0; i < bits.size(); ++i) mean[i] += m[i] / (double)(L * H);
  pooled = fit_exponential(bits, mean);
  fits.assign(L, std::vector<ExponentialFit>(H));
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) fits[l][h] = all_positive(mse[l][h]) ? fit_exponential(bits, mse[l][h]) : pooled;
}

}  // namespace

double ComponentFits::min_r2() const {
  double r = 1;
  for (const auto* t : {&key, &value})
    for (const auto& l : *t)
      for (const auto& f : l) r = std::min(r, f.r2);
  return r;
}

double ComponentFits::mean_r2() const {
  double s = 0;
  int n = 0;
  for (const auto* t : {&key, &value})
    for (const auto& l : *t)
      for (const auto& f : l) s += f.r2, ++n;
  return n ? s / n : 0;
}

ComponentFits fit_components(const KvSamples& kv, QuantMethod q, const std::vector<int>& bits) {
  MPKV_CHECK(bits.size() >= 2, "distortion fits: need at least two bit-widths");
  for (int b : bits) validate(QuantOptions{q, KvRole::key, b, kv.head_dim, 0});
  ComponentFits f;
  f.bits = bits;
  fit_role(kv, q, KvRole::key, bits, f.key, f.mse_key, f.pooled_key);
  fit_role(kv, q, KvRole::value, bits, f.value, f.mse_value, f.pooled_value);
  return f;
}

void to_json(nlohmann::json& j, const ComponentFits& f) {
  j = {{"bits", f.bits},           {"key", f.key},         {"value", f.value}, {"mse_key", f.mse_key},
       {"mse_value", f.mse_value}, {"min_r2", f.min_r2()}, {"mean_r2", f.mean_r2()}};
}

void from_json(const nlohmann::json& j, ComponentFits& f) {
  f.bits = j.at("bits").get<std::vector<int>>();
  f.key = j.at("key").get<decltype(f.key)>();
  f.value = j.at("value").get<decltype(f.value)>();
  f.mse_key = j.at("mse_key").get<decltype(f.mse_key)>();
  f.mse_value = j.at("mse_value").get<decltype(f.mse_value)>();
}

}  // namespace mpkv::calib

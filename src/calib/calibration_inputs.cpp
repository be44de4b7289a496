#include "calib/calibration_inputs.h"

#include <string>
#include <utility>

#include "util/error.h"

namespace mpkv::calib {

CalibrationInputs make_calibration_inputs(const CalibrationReport& r, ComponentFits fits, const KvModelIdentity& model,
                                          QuantMethod quantizer, const CalibrationSource& source, double total_s,
                                          double cpu_s) {
  CalibrationInputs in;
  in.fits = std::move(fits);
  in.fit_k = in.fits.pooled_key;
  in.fit_v = in.fits.pooled_value;
  in.model = model;
  in.quantizer = quantizer;
  in.bits = r.sensitivity.bits;
  in.pmkvq_k = r.sensitivity.pmkvq_key;
  in.pmkvq_v = r.sensitivity.pmkvq_value;
  in.w_k = r.sensitivity.w_key;
  in.w_v = r.sensitivity.w_value;
  in.smoothing = r.smoothing;
  in.total_s = total_s;
  in.cpu_s = cpu_s;
  in.calib_file = source.calib_file;
  in.calib_n = source.calib_n;
  in.calib_len = source.calib_len;
  in.pi_scale = source.pi_scale;
  return in;
}

void validate(const CalibrationInputs& in, int n_layer, int n_head_kv) {
  const auto shape_ok = [&](const auto& t) {
    if ((int)t.size() != n_layer) return false;
    for (const auto& row : t)
      if ((int)row.size() != n_head_kv) return false;
    return true;
  };
  MPKV_CHECK(shape_ok(in.pmkvq_k) && shape_ok(in.pmkvq_v) && shape_ok(in.w_k) && shape_ok(in.w_v),
             "calibration: sensitivity tables do not match the model's " + std::to_string(n_layer) + " layers x " +
                 std::to_string(n_head_kv) + " KV heads");
  for (const auto* t : {&in.pmkvq_k, &in.pmkvq_v})
    for (const auto& l : *t)
      for (const auto& h : l)
        MPKV_CHECK(h.size() == in.bits.size(), "calibration: a PM-KVQ row has " + std::to_string(h.size()) +
                                                   " values for " + std::to_string(in.bits.size()) + " bit-widths");
  MPKV_CHECK(in.fits.empty() || (shape_ok(in.fits.key) && shape_ok(in.fits.value)),
             "calibration: per-component distortion fits do not match the model's shape");
  MPKV_CHECK(in.smoothing.empty() || (int)in.smoothing.lambda.size() == n_layer,
             "calibration: smoothing scales for " + std::to_string(in.smoothing.lambda.size()) +
                 " layers, the model has " + std::to_string(n_layer));
}

void to_json(nlohmann::json& j, const CalibrationInputs& in) {
  j = nlohmann::json::object();
  j["format"] = kCalibrationReportFormat;
  j["version"] = 1;
  j["model"] = {{"arch", in.model.arch}, {"tensor_layout_hash", format_layout_hash(in.model.tensor_layout_hash)}};
  j["quantizer"] = method_name(in.quantizer);
  j["calib_file"] = in.calib_file;
  j["data"] = {{"n_samples", in.calib_n}, {"sample_len", in.calib_len}, {"pi_scale", in.pi_scale}};
  j["sensitivity"] = {{"bits", in.bits},
                      {"pmkvq_key", in.pmkvq_k},
                      {"pmkvq_value", in.pmkvq_v},
                      {"ratequant_w_key", in.w_k},
                      {"ratequant_w_value", in.w_v}};
  if (!in.smoothing.empty()) j["smoothing"] = in.smoothing;
  j["distortion_fits"] = {{"key", in.fit_k}, {"value", in.fit_v}};
  if (!in.fits.empty()) j["distortion_fits"]["per_component"] = in.fits;
  j["calibrate_total_s"] = in.total_s;
  j["calibrate_cpu_s"] = in.cpu_s;
}

void from_json(const nlohmann::json& j, CalibrationInputs& in) {
  MPKV_CHECK(j.is_object() && j.value("format", "") == kCalibrationReportFormat, "not an mpkv calibration report");
  try {
    const auto& m = j.at("model");
    in.model.arch = m.at("arch").get<std::string>();
    in.model.tensor_layout_hash = parse_layout_hash(m.at("tensor_layout_hash").get<std::string>());
    in.quantizer = parse_method(j.at("quantizer").get<std::string>());
    const auto& s = j.at("sensitivity");
    in.bits = s.at("bits").get<std::vector<int>>();
    in.pmkvq_k = s.at("pmkvq_key").get<decltype(in.pmkvq_k)>();
    in.pmkvq_v = s.at("pmkvq_value").get<decltype(in.pmkvq_v)>();
    in.w_k = s.at("ratequant_w_key").get<decltype(in.w_k)>();
    in.w_v = s.at("ratequant_w_value").get<decltype(in.w_v)>();
    in.smoothing = j.contains("smoothing") ? j.at("smoothing").get<SmoothingScales>() : SmoothingScales{};
    in.fit_k = j.at("distortion_fits").at("key").get<ExponentialFit>();
    in.fit_v = j.at("distortion_fits").at("value").get<ExponentialFit>();
    in.fits = j.at("distortion_fits").contains("per_component")
                  ? j.at("distortion_fits").at("per_component").get<ComponentFits>()
                  : ComponentFits{};
    in.total_s = j.at("calibrate_total_s").get<double>();
    in.cpu_s = j.at("calibrate_cpu_s").get<double>();
    in.calib_file = j.at("calib_file").get<std::string>();
    in.calib_n = j.at("data").at("n_samples").get<int>();
    in.calib_len = j.at("data").at("sample_len").get<int>();
    in.pi_scale = j.at("data").at("pi_scale").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed calibration report (") + e.what() + ")");
  }
}

}  // namespace mpkv::calib

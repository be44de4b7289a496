// What the plan allocators need from a calibration (src/calib/plan_allocation.h), computed by
// `mpkv calibrate` or read back from its report (--report-in), with the JSON both use.
//
// JSON (the keys this reads; a full calibration report holds more, ignored here):
//   {"format": "mpkv-calibration-report", "version": 1,
//    "model": {"arch", "tensor_layout_hash"}, "quantizer": "uniform", "calib_file": "...",
//    "data": {"n_samples", "sample_len", "pi_scale"},
//    "sensitivity": {"bits": [...], "pmkvq_key": [[[s per bit] per head] per layer], "pmkvq_value",
//                    "ratequant_w_key": [[w per head] per layer], "ratequant_w_value"},
//    "smoothing": {SmoothingScales} (absent: calibrated without smoothing),
//    "distortion_fits": {"key": {alpha, beta, r2}, "value": {...},     (pooled over components)
//                        "per_component": {ComponentFits} (absent in older reports)},
//    "calibrate_total_s", "calibrate_cpu_s"}
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calib/calibrate.h"
#include "calib/distortion_fits.h"
#include "calib/smoothing.h"
#include "kvcache/kv_plan.h"
#include "quant/distortion.h"
#include "quant/quant_options.h"

namespace mpkv::calib {

inline constexpr const char* kCalibrationReportFormat = "mpkv-calibration-report";

struct CalibrationInputs {
  KvModelIdentity model;
  QuantMethod quantizer = QuantMethod::uniform;
  std::vector<int> bits;                                           // widths of the PM-KVQ tables
  std::vector<std::vector<std::vector<double>>> pmkvq_k, pmkvq_v;  // [layer][head][bit index]
  std::vector<std::vector<double>> w_k, w_v;                       // [layer][head]
  SmoothingScales smoothing;                                       // empty: no smoothing
  ExponentialFit fit_k, fit_v;                                     // D(b) per role, pooled
  ComponentFits fits;                                              // D(b) per component (may be empty)
  double total_s = 0, cpu_s = 0;                                   // calibration wall / CPU time
  std::string calib_file;
  int calib_n = 0, calib_len = 0;
  double pi_scale = 0;
};

// Where a calibration's data came from (CalibrationInputs' provenance fields).
struct CalibrationSource {
  std::string calib_file;
  int calib_n = 0, calib_len = 0;
  double pi_scale = 0;
};

// The allocators' inputs from a fresh calibration (`mpkv calibrate` without --report-in): its
// sensitivities and smoothing, the per-component distortion fits (the pooled ones taken from
// them), the model and quantizer it was run for, its source and its wall / CPU seconds.
CalibrationInputs make_calibration_inputs(const CalibrationReport& r, ComponentFits fits, const KvModelIdentity& model,
                                          QuantMethod quantizer, const CalibrationSource& source, double total_s,
                                          double cpu_s);

// Error (naming the field) unless the tables match n_layer x n_head_kv and every PM-KVQ row has
// one value per width.
void validate(const CalibrationInputs& in, int n_layer, int n_head_kv);

void to_json(nlohmann::json& j, const CalibrationInputs& in);
// Error on another format or missing / malformed fields (not a json exception).
void from_json(const nlohmann::json& j, CalibrationInputs& in);

}  // namespace mpkv::calib

// Reading a saved calibration report (`mpkv calibrate --report-out`) for `calibrate --report-in`
// and `distortion --check`: Error (prefixed with `where`) unless it is valid JSON, a well-formed
// report, and for this model (architecture and tensor layout hash).
#pragma once
#include <string>

#include "calib/calibration_inputs.h"
#include "model/model_config.h"

namespace mpkv::cli {

calib::CalibrationInputs read_calibration_report(const std::string& path, const std::string& where,
                                                 const ModelConfig& c, const KvModelIdentity& id);

}  // namespace mpkv::cli

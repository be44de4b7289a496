#include "calib_report.h"

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "util/error.h"

namespace mpkv::cli {

calib::CalibrationInputs read_calibration_report(const std::string& path, const std::string& where,
                                                 const ModelConfig& c, const KvModelIdentity& id) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "not valid JSON (" + e.what() + ")");
  }
  calib::CalibrationInputs in;
  try {
    in = j.get<calib::CalibrationInputs>();
    calib::validate(in, c.n_layer, c.n_head_kv);
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
  MPKV_CHECK(in.model.arch == id.arch && in.model.tensor_layout_hash == id.tensor_layout_hash,
             where + "the report is for another model (" + in.model.arch + ", " +
                 format_layout_hash(in.model.tensor_layout_hash) + "), this model is " + id.arch + ", " +
                 format_layout_hash(id.tensor_layout_hash));
  return in;
}

}  // namespace mpkv::cli

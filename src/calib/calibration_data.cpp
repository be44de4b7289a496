#include "calib/calibration_data.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::calib {

namespace {

// For consecutive windows only a prefix of the text is tokenized: about this many bytes per token
// needed (English BPE averages ~4), cut after a newline; the whole text when that falls short.
constexpr size_t kPrefixBytesPerToken = 8;
// Tokens dropped at the end of a prefix: the pre-tokenizer may split the last words differently
// once the text continues, so only tokens well before the cut are trusted.
constexpr size_t kPrefixMarginTokens = 64;

}  // namespace

void validate(const CalibrationDataOptions& o) {
  MPKV_CHECK(o.n_samples >= 1, "--calib-n must be at least 1 (got " + std::to_string(o.n_samples) + ")");
  MPKV_CHECK(o.sample_len >= 2, "--calib-len must be at least 2 tokens (got " + std::to_string(o.sample_len) + ")");
  MPKV_CHECK(std::isfinite(o.pi_scale) && o.pi_scale > 0,
             "--pi-scale must be a positive number (got " + std::to_string(o.pi_scale) + ")");
}

std::string read_calibration_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MPKV_CHECK(f.good(), "cannot read calibration file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  MPKV_CHECK(!f.bad(), "error reading calibration file '" + path + "'");
  std::string text = ss.str();
  MPKV_CHECK(!text.empty(), "calibration file '" + path + "' is empty");
  return text;
}

CalibrationData make_calibration_data(const Tokenizer& tokenizer, const std::string& text,
                                      const CalibrationDataOptions& o) {
  validate(o);
  const size_t n = (size_t)o.n_samples, len = (size_t)o.sample_len, need = n * len;
  std::vector<int32_t> ids;
  if (o.spacing == SampleSpacing::consecutive && need * kPrefixBytesPerToken < text.size()) {
    size_t cut = text.find('\n', need * kPrefixBytesPerToken);
    ids = tokenizer.encode(text.substr(0, cut == std::string::npos ? text.size() : cut + 1), false, false);
    if (cut != std::string::npos) ids.resize(ids.size() > kPrefixMarginTokens ? ids.size() - kPrefixMarginTokens : 0);
  }
  if (ids.size() < need) ids = tokenizer.encode(text, false, false);
  MPKV_CHECK(ids.size() >= need, "calibration text has " + std::to_string(ids.size()) + " tokens; --calib-n " +
                                     std::to_string(n) + " x --calib-len " + std::to_string(len) + " needs " +
                                     std::to_string(need));
  CalibrationData data;
  data.options = o;
  data.text_tokens = ids.size();
  for (size_t i = 0; i < n; ++i) {
    size_t start = i * len;
    if (o.spacing == SampleSpacing::even && n > 1) start = i * (ids.size() - len) / (n - 1);
    std::vector<int32_t> w(ids.begin() + start, ids.begin() + start + len);
    if (tokenizer.add_bos() && tokenizer.bos() >= 0) w[0] = tokenizer.bos();
    data.samples.push_back(std::move(w));
  }
  return data;
}

const char* spacing_name(SampleSpacing s) { return s == SampleSpacing::consecutive ? "consecutive" : "even"; }

SampleSpacing parse_spacing(const std::string& s) {
  if (s == "consecutive") return SampleSpacing::consecutive;
  if (s == "even") return SampleSpacing::even;
  throw Error("unknown calibration sample spacing '" + s + "' (expected consecutive or even)");
}

void to_json(nlohmann::json& j, const CalibrationDataOptions& o) {
  j = nlohmann::json{{"n_samples", o.n_samples},
                     {"sample_len", o.sample_len},
                     {"pi_scale", o.pi_scale},
                     {"spacing", spacing_name(o.spacing)}};
}

}  // namespace mpkv::calib

// Calibration text -> token windows (docs/algorithms.md §4-§6): `--calib-file`, `--calib-n`,
// `--calib-len`, `--pi-scale`.
//
// The text is tokenized once (no special-token parsing: a calibration file is plain text) and
// cut into n windows of len tokens, deterministically:
//   consecutive  windows [i len, (i+1) len) from the start of the text;
//   even         n windows spread evenly over the whole text (first at 0, last ending at the end).
// When the model's tokenizer adds BOS, each window's first token is replaced by BOS (what
// llama.cpp's perplexity does with its chunks), so every sample starts like a real prompt.
// pi_scale s is carried with the data: the forward runs token t at RoPE position t * s
// (positional interpolation: s = 4 lets 512 tokens sweep the rotation angles of 2048 positions).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mpkv {
class Tokenizer;
}

namespace mpkv::calib {

enum class SampleSpacing { consecutive, even };

struct CalibrationDataOptions {
  int n_samples = 16;          // --calib-n
  int sample_len = 512;        // --calib-len (tokens per window, >= 2)
  double pi_scale = 1.0;       // --pi-scale (> 0)
  SampleSpacing spacing = SampleSpacing::consecutive;
};

struct CalibrationData {
  CalibrationDataOptions options;
  std::vector<std::vector<int32_t>> samples;  // [n_samples][sample_len]
  size_t text_tokens = 0;                     // tokens the windows were cut from
};

// Throws Error naming the option unless n >= 1, len >= 2 and pi_scale is finite and > 0.
void validate(const CalibrationDataOptions& o);

// The whole file; Error when it cannot be read or is empty.
std::string read_calibration_text(const std::string& path);

// Error (with the token count and what was asked) when the text holds fewer than n * len tokens.
CalibrationData make_calibration_data(const Tokenizer& tokenizer, const std::string& text,
                                      const CalibrationDataOptions& options);

const char* spacing_name(SampleSpacing s);
SampleSpacing parse_spacing(const std::string& s);  // "consecutive" | "even"; Error otherwise

void to_json(nlohmann::json& j, const CalibrationDataOptions& o);

}  // namespace mpkv::calib

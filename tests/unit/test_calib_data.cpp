// Calibration windows from text: a tokenizer whose tokens are single letters and the newline, so
// every expected id is read off the text by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "calib/calibration_data.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::calib {
namespace {

// ids: 'a'..'z' -> 0..25, '\n' -> 26 ("Ċ" in the GPT-2 byte map), "<s>" -> 27 (BOS, control).
Tokenizer letter_tokenizer(bool add_bos) {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  for (char ch = 'a'; ch <= 'z'; ++ch) tokens.push_back(std::string(1, ch)), types.push_back(TokenType::normal);
  tokens.push_back("\xC4\x8A");  // U+010A
  types.push_back(TokenType::normal);
  tokens.push_back("<s>");
  types.push_back(TokenType::control);
  SpecialTokenIds sp;
  sp.bos = 27;
  return Tokenizer(tokens, types, {}, "gpt-2", sp, add_bos);
}

int32_t id_of(char ch) { return ch == '\n' ? 26 : ch - 'a'; }

// Lines of 9 letters + '\n' (10 tokens per line); letters cycle so windows differ.
std::string lines(int n_lines) {
  std::string s;
  for (int k = 0; k < n_lines; ++k) {
    for (int i = 0; i < 9; ++i) s += (char)('a' + (k * 9 + i) % 26);
    s += '\n';
  }
  return s;
}

TEST(CalibData, ConsecutiveWindowsFromTheStart) {
  const std::string text = lines(10);  // 100 tokens
  CalibrationDataOptions o;
  o.n_samples = 3;
  o.sample_len = 20;
  o.pi_scale = 4;
  const CalibrationData d = make_calibration_data(letter_tokenizer(false), text, o);
  ASSERT_EQ(d.samples.size(), 3u);
  EXPECT_EQ(d.options.pi_scale, 4.0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(d.samples[i].size(), 20u);
    for (int t = 0; t < 20; ++t) EXPECT_EQ(d.samples[i][t], id_of(text[i * 20 + t])) << i << " " << t;
  }
  // Window 1 starts at token 20 = line 2's first letter: (2*9) % 26 = 18 -> 's'.
  EXPECT_EQ(d.samples[1][0], 18);
  EXPECT_EQ(d.samples[0][9], 26);  // the first newline
}

TEST(CalibData, EvenlySpacedWindowsCoverTheText) {
  const std::string text = lines(10);  // 100 tokens
  CalibrationDataOptions o;
  o.n_samples = 3;
  o.sample_len = 10;
  o.spacing = SampleSpacing::even;
  const CalibrationData d = make_calibration_data(letter_tokenizer(false), text, o);
  ASSERT_EQ(d.samples.size(), 3u);
  EXPECT_EQ(d.text_tokens, 100u);
  // Starts 0, 45, 90: first at the start, last ending at the end.
  for (int i = 0; i < 3; ++i) {
    const int start = i == 0 ? 0 : i == 1 ? 45 : 90;
    for (int t = 0; t < 10; ++t) EXPECT_EQ(d.samples[i][t], id_of(text[start + t]));
  }
  EXPECT_EQ(d.samples[2][9], 26);  // ends with the last newline
}

TEST(CalibData, BosReplacesTheFirstTokenOfEachWindow) {
  const std::string text = lines(10);
  CalibrationDataOptions o;
  o.n_samples = 2;
  o.sample_len = 30;
  const CalibrationData d = make_calibration_data(letter_tokenizer(true), text, o);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(d.samples[i][0], 27);
    for (int t = 1; t < 30; ++t) EXPECT_EQ(d.samples[i][t], id_of(text[i * 30 + t]));
  }
}

// A long text: consecutive windows come from a tokenized prefix and must equal the full text's.
TEST(CalibData, LongTextPrefixGivesTheSameWindows) {
  const std::string text = lines(5000);  // 50000 tokens
  CalibrationDataOptions o;
  o.n_samples = 4;
  o.sample_len = 50;
  const CalibrationData d = make_calibration_data(letter_tokenizer(false), text, o);
  for (int i = 0; i < 4; ++i)
    for (int t = 0; t < 50; ++t) ASSERT_EQ(d.samples[i][t], id_of(text[i * 50 + t]));
  EXPECT_LT(d.text_tokens, 50000u);  // only a prefix was tokenized
  EXPECT_GE(d.text_tokens, 200u);
}

TEST(CalibData, RejectsBadOptionsAndShortText) {
  const Tokenizer tok = letter_tokenizer(false);
  const std::string text = lines(10);
  CalibrationDataOptions o;
  o.n_samples = 0;
  EXPECT_THROW(make_calibration_data(tok, text, o), Error);
  o = {};
  o.sample_len = 1;
  EXPECT_THROW(make_calibration_data(tok, text, o), Error);
  for (double s : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    o = {};
    o.pi_scale = s;
    EXPECT_THROW(make_calibration_data(tok, text, o), Error) << s;
  }
  o = {};
  o.n_samples = 3;
  o.sample_len = 40;  // 120 > 100 tokens
  try {
    make_calibration_data(tok, text, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("100 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("120"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_spacing("random"), Error);
  EXPECT_EQ(parse_spacing("even"), SampleSpacing::even);
}

TEST(CalibData, ReadsFilesAndRejectsMissingOrEmptyOnes) {
  const std::string p = test::temp_dir() + "/calib.txt", e = test::temp_dir() + "/empty.txt";
  std::ofstream(p) << "abc\n";
  std::ofstream(e).flush();
  EXPECT_EQ(read_calibration_text(p), "abc\n");
  EXPECT_THROW(read_calibration_text(e), Error);
  EXPECT_THROW(read_calibration_text(test::temp_dir() + "/nope.txt"), Error);
}

TEST(CalibData, OptionsSerialise) {
  CalibrationDataOptions o;
  o.pi_scale = 4;
  o.spacing = SampleSpacing::even;
  const nlohmann::json j = o;
  EXPECT_EQ(j.at("pi_scale").get<double>(), 4.0);
  EXPECT_EQ(j.at("spacing").get<std::string>(), "even");
  EXPECT_EQ(j.at("n_samples").get<int>(), 16);
  EXPECT_EQ(j.at("sample_len").get<int>(), 512);
}

}  // namespace
}  // namespace mpkv::calib

// End-to-end `mpkv eval` on a tiny synthetic model: a matrix with a calibrated plan under both
// protocols plus drift writes consistent markdown and JSON; bad input (a missing plan, an unknown
// protocol, a text shorter than the windows) is a clear error that writes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "fixtures/tiny_model.h"
#include "test_support.h"

namespace mpkv {
namespace {

using test::run_cli;

std::string dir() { return test::temp_dir(); }

std::string tiny_model() {
  const std::string p = dir() + "/eval_tiny.gguf";
  if (!std::filesystem::exists(p)) {
    test::TinyModelSpec spec;
    spec.n_layer = 2;
    test::write_tiny_model(p, spec);
  }
  return p;
}

// Byte-level text (the tiny vocabulary has no merges: one token per byte).
std::string text_file() {
  const std::string p = dir() + "/eval_text.txt";
  std::ofstream f(p);
  for (int i = 0; i < 40; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog. ";
  return p;
}

TEST(CliEval, MatrixWithPlanBothProtocolsAndDrift) {
  const std::string m = tiny_model(), text = text_file(), plans = dir() + "/eval_plans";
  std::filesystem::create_directories(plans);
  const std::string report = dir() + "/eval_calib_report.json";
  auto r = run_cli("calibrate -m " + m + " --method ratequant --avg-bits 2.5 -o " + plans + "/ratequant_2.5.json --calib-file " +
                   text + " --calib-n 2 --calib-len 48 --window 4 --sink 1 -t 1 --report-out " + report);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli("calibrate -m " + m + " --method ratequant --avg-bits 2 -o " + plans + "/ratequant_2.json --report-in " + report +
              " --window 4 --sink 1 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string json = dir() + "/eval.json", md = dir() + "/eval.md";
  r = run_cli("eval -m " + m + " -f " + text + " --methods f16,kivi,progressive,ratequant --bits 2,2.5 --plan-dir " + plans +
              " -c 256 --windows 2 --ci-block 16 --drift-tokens 40 --drift-bucket 16 --drift-methods kivi --drift-bits 2 -t 1 --json " +
              json + " --md " + md);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["n_ctx"], 256);
  EXPECT_EQ(j["windows"], 2);
  // f16 + kivi-2, kivi-2.5, progressive-2, ratequant-2, ratequant-2.5 under each protocol;
  // progressive-2.5 skipped.
  ASSERT_EQ(j["rows"].size(), 12u);
  ASSERT_EQ(j["skipped"].size(), 1u);
  int decode = 0;
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["scored"], 2 * (256 - 1 - 128));
    // Bootstrap intervals: at --ci-block 16, 2 windows x 127 scored positions make 2 x 8 blocks; the
    // interval brackets the row's own estimate (a mean over all blocks is inside its resampling range).
    const auto& ci = row["ci95"];
    EXPECT_EQ(ci["block"], 16);
    EXPECT_EQ(row["ci_blocks"], 16);
    EXPECT_EQ(row["ci95_by_block"].size(), 5u);
    const double dlo = ci["ppl_delta_pct"][0], dhi = ci["ppl_delta_pct"][1];
    const double klo = ci["kl_mean"][0], khi = ci["kl_mean"][1];
    if (row["method"] == "f16") {
      EXPECT_EQ(row["kl_mean"], 0.0);
      EXPECT_EQ(row["top1"], 1.0);
      EXPECT_EQ(dlo, 0.0);
      EXPECT_EQ(dhi, 0.0);
      EXPECT_EQ(khi, 0.0);
    } else {
      EXPECT_GT(row["kl_mean"].get<double>(), 0.0) << row["label"];
      EXPECT_LT(klo, khi) << row["label"];
      EXPECT_LE(klo, row["kl_mean"].get<double>()) << row["label"];
      EXPECT_GE(khi, row["kl_mean"].get<double>()) << row["label"];
      EXPECT_LE(dlo, row["ppl_delta_pct"].get<double>()) << row["label"];
      EXPECT_GE(dhi, row["ppl_delta_pct"].get<double>()) << row["label"];
    }
    if (row["protocol"] == "decode") {
      ++decode;
      EXPECT_GT(row["stored_bits_per_element"].get<double>(), 0.0);
    } else {
      EXPECT_TRUE(row["stored_bits_per_element"].is_null());
    }
  }
  EXPECT_EQ(decode, 6);
  const auto& d = j["drift"];
  EXPECT_EQ(d["tokens"], 40);
  ASSERT_EQ(d["methods"].size(), 1u);
  EXPECT_EQ(d["methods"][0]["kl_mean"].size(), 3u);  // buckets of 16, 16, 8
  EXPECT_TRUE(std::filesystem::exists(md));
  EXPECT_NE(r.out.find("| ratequant-2.5 | 2.5 | decode |"), std::string::npos) << r.out;
}

TEST(CliEval, BadInputIsAnErrorAndWritesNothing) {
  const std::string m = tiny_model(), text = text_file(), json = dir() + "/eval_bad.json";
  auto r = run_cli("eval -m " + m + " -f " + text + " --methods ratequant --bits 3 --plan-dir " + dir() +
                   "/no_plans -c 64 --windows 1 -t 1 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("mpkv calibrate"), std::string::npos) << r.out;
  r = run_cli("eval -m " + m + " -f " + text + " --methods kivi --bits 2 --protocols decode,sideways -c 64 -t 1 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("unknown protocol"), std::string::npos) << r.out;
  r = run_cli("eval -m " + m + " -f " + text + " --methods kivi --bits 2 -c 4096 --windows 2 -t 1 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("fewer than"), std::string::npos) << r.out;
  r = run_cli("eval -m " + m + " --methods kivi --bits 2 -t 1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_FALSE(std::filesystem::exists(json));
}

}  // namespace
}  // namespace mpkv

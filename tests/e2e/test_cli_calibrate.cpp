// End-to-end `mpkv calibrate` on a tiny synthetic model: every method writes a valid plan (with the
// report reused), `generate --kv-plan` and `ppl --kv-plan` run it; bad options, an infeasible budget
// and a plan for another model are clear errors that leave no output file.
#include <gtest/gtest.h>

#include <cstdio>
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

std::string tiny_model(const std::string& name, const test::TinyModelSpec& spec) {
  const std::string p = dir() + "/" + name + ".gguf";
  if (!std::filesystem::exists(p)) test::write_tiny_model(p, spec);
  return p;
}

// Byte-level text (the tiny vocabulary has no merges: one token per byte).
std::string calib_text() {
  const std::string p = dir() + "/calib_cli.txt";
  std::ofstream f(p);
  for (int i = 0; i < 60; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog. ";
  return p;
}

const std::string kCalib = " --calib-n 2 --calib-len 48 --pi-scale 2 --window 4 --sink 1 -t 1";

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

TEST(CliCalibrate, EveryMethodWritesAPlanThatGenerateAndPplRun) {
  const std::string m = tiny_model("calib_cli_a", {});
  const std::string text = calib_text(), report = dir() + "/calib_cli_report.json";
  std::filesystem::remove(report);
  auto r = run_cli("calibrate -m " + m + " --method ratequant --avg-bits 3 -o " + dir() + "/cli_rq.json --calib-file " +
                   text + kCalib + " --report-out " + report);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("predicted gain AM/GM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU"), std::string::npos) << r.out;
  ASSERT_TRUE(std::filesystem::exists(report));
  for (const std::string method : {"pmkvq", "ratequant", "combined"}) {
    const std::string plan = dir() + "/cli_" + method + ".json";
    std::filesystem::remove(plan);
    r = run_cli("calibrate -m " + m + " --method " + method + " --avg-bits 2.5 -o " + plan + " --report-in " + report +
                " --window 4 --sink 1");
    ASSERT_EQ(r.exit_code, 0) << method << ": " << r.out;
    const nlohmann::json j = read_json(plan);
    EXPECT_EQ(j["format"], "mpkv-kv-plan");
    EXPECT_EQ(j["model"]["arch"], "llama");
    EXPECT_EQ(j["solve"]["method"], method);
    EXPECT_EQ(j["progressive"], method != "ratequant") << "pmkvq and combined are progressive";
    EXPECT_TRUE(j.contains("smoothing")) << method;
    // The allocation fits the budget the bits were solved for, and averages at most the target.
    EXPECT_LE(j["solve"]["bytes"].get<int64_t>(), j["solve"]["budget_bytes"].get<int64_t>()) << method;
    EXPECT_LE(j["solve"]["avg_bits"].get<double>(), 2.5 + 1e-9) << method;
    double sum = 0;
    int n = 0;
    for (const auto& c : j["components"]) {
      const int b = c["bits"];
      EXPECT_TRUE(b == 2 || b == 3 || b == 4 || b == 8) << method << " bits " << b;
      if (method != "ratequant") {
        EXPECT_NE(b, 3) << method << " finals are ladder widths";
        EXPECT_TRUE(c.contains("sensitivity")) << method << " plans carry shrink costs";
      }
      sum += b;
      ++n;
    }
    EXPECT_NEAR(sum / n, j["solve"]["avg_bits"].get<double>(), 1e-9);
    r = run_cli("generate -m " + m + " --kv-plan " + plan + " -p 'the quick brown fox jumps' -n 8 --temp 0 -t 1");
    EXPECT_EQ(r.exit_code, 0) << method << ": " << r.out;
    r = run_cli("ppl -m " + m + " -f " + text + " -c 32 --chunks 2 -t 1 --kv-plan " + plan);
    EXPECT_EQ(r.exit_code, 0) << method << ": " << r.out;
    EXPECT_NE(r.out.find("PPL = "), std::string::npos) << r.out;
    // A progressive plan runs under what one 32-token window needs (kvcache/run_budget.h), named in
    // the summary; a fixed plan has no budget.
    EXPECT_EQ(r.out.find(", budget ") != std::string::npos, method != "ratequant") << method << ": " << r.out;
  }
  // A fixed K/V split from the same report: the RateQuant plan's budget, its smoothing, its widths.
  const std::string split = dir() + "/cli_fixed_k3v2.json";
  r = run_cli("calibrate -m " + m + " --method fixed --k-bits 3 --v-bits 2 -o " + split + " --report-in " + report +
              " --window 4 --sink 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json f = read_json(split), q = read_json(dir() + "/cli_ratequant.json");
  EXPECT_EQ(f["solve"]["bytes"], q["solve"]["budget_bytes"]);
  EXPECT_EQ(f["smoothing"], q["smoothing"]);
  for (const auto& c : f["components"]) EXPECT_EQ(c["bits"].get<int>(), c["role"] == "key" ? 3 : 2) << c;
}

TEST(CliCalibrate, PlanForAnotherModelIsAClearError) {
  const std::string a = tiny_model("calib_cli_a", {});
  test::TinyModelSpec other;
  other.d_ffn = 128;
  const std::string b = tiny_model("calib_cli_b", other);
  const std::string plan = dir() + "/cli_plan_for_a.json";
  auto r = run_cli("calibrate -m " + a + " --method pmkvq --avg-bits 4 -o " + plan + " --calib-file " + calib_text() +
                   kCalib + " --no-smooth");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli("generate -m " + b + " --kv-plan " + plan + " -p hello -n 2 -t 1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("error: " + plan + ": KV plan is for another model"), std::string::npos) << r.out;
  r = run_cli("ppl -m " + b + " -f " + calib_text() + " -c 32 --chunks 1 --kv-plan " + plan);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("KV plan is for another model"), std::string::npos) << r.out;
}

TEST(CliCalibrate, BadOptionsAndInfeasibleBudgetsAreErrorsWithoutOutput) {
  const std::string m = tiny_model("calib_cli_a", {});
  const std::string out = dir() + "/cli_never.json";
  std::filesystem::remove(out);
  const std::string base = "calibrate -m " + m + " -o " + out + " --calib-file " + calib_text() + " -t 1";
  struct Case { std::string args, fragment; };
  for (const Case& c : std::vector<Case>{
           {" --method greedy --avg-bits 3", "--method 'greedy' is not one of pmkvq, ratequant, combined"},
           {" --method pmkvq", "give exactly one of --avg-bits B, --kv-budget-mib M"},
           {" --method fixed --k-bits 4", "needs both --k-bits and --v-bits"},
           {" --method fixed --k-bits 4 --v-bits 2 --avg-bits 3", "give exactly one of"},
           {" --method pmkvq --k-bits 4 --v-bits 2", "apply to --method fixed"},
           {" --method fixed --k-bits 5 --v-bits 1", "bits"},
           {" --method pmkvq --avg-bits 3 --kv-budget-mib 1 --max-len 64", "give exactly one of"},
           {" --method ratequant --avg-bits 9", "--avg-bits 9"},
           {" --method ratequant --kv-budget-mib 1", "needs --max-len"},
           {" --method combined --avg-bits 3 --quantizer turbo", "min-max codes"},
           {" --method ratequant --avg-bits 3 --per-head", "--per-head applies to --method pmkvq only"},
           {" --method ratequant --avg-bits 3 --calib-n 0", "calib"},
           {" --method ratequant --avg-bits 3 --pi-scale -1", "pi"},
           {" --method ratequant --kv-budget-mib 0.001 --max-len 4096", "smallest feasible budget is"},
       }) {
    const auto r = run_cli(base + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << ": " << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.args;
  }
  const auto r = run_cli("calibrate -m " + m + " --method pmkvq --avg-bits 3 -o /nonexistent_dir/p.json --calib-file " +
                         calib_text());
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  const std::string bad_report = dir() + "/cli_bad_report.json";
  std::ofstream(bad_report) << "{\"format\": \"mpkv-calibration-report\", \"model\": ";
  const auto r2 = run_cli("calibrate -m " + m + " --method pmkvq --avg-bits 3 -o " + out + " --report-in " + bad_report);
  EXPECT_EQ(r2.exit_code, 1) << r2.out;
  EXPECT_NE(r2.out.find("not valid JSON"), std::string::npos) << r2.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace mpkv

// The prefix-cache options of `mpkv generate` and `mpkv serve` (docs/serving.md "Prefix cache";
// tools/cli_options.cpp add_prefix_cache_options): a floor that is not 0, 2, 4, 8 or 16 is an error
// before anything loads; on the real model, prompts that share a long prefix give the same greedy
// text with the cache on, at floor 16, and off (f16 pages: bit for bit), and -v reports cached blocks
// only with the cache on.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "test_support.h"

namespace mpkv {
namespace {

TEST(CliPrefixCache, BadFloorIsAnErrorBeforeLoading) {
  for (const char* cmd : {"serve -m no_such_model.gguf --port 0", "generate -m no_such_model.gguf -p hi"}) {
    const test::CliResult r = test::run_cli(std::string(cmd) + " --prefix-cache-floor-bits 3");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("--prefix-cache-floor-bits"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("listening on"), std::string::npos) << r.out;
  }
}

TEST(CliPrefixCache, SharedPrefixGivesTheSameTextOnAndOff) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  // Three prompts with a ~150-token common start: the engine prefills them in one step, so the
  // second and third find the first one's full pages cached and switch to them.
  std::string common;
  for (int i = 0; i < 12; ++i) common += "Rule " + std::to_string(i) + ": answer briefly and never invent facts. ";
  const std::string file = test::temp_dir() + "/prefix_prompts.txt";
  std::ofstream(file) << common << "Name a colour.\n" << common << "Name a fruit.\n" << common << "Name a colour.\n";
  const std::string base = "generate -m " + m + " --prompts " + file + " -n 8 --temp 0 --kv-budget-mib 64";
  const test::CliResult on = test::run_cli(base + " -v"), off = test::run_cli(base + " -v --no-prefix-cache"),
                        lru = test::run_cli(base + " --prefix-cache-floor-bits 16");
  ASSERT_EQ(on.exit_code, 0) << on.out;
  ASSERT_EQ(off.exit_code, 0) << off.out;
  ASSERT_EQ(lru.exit_code, 0) << lru.out;
  const auto answers = [](const std::string& out) {  // the "--- sequence" blocks, before the summary
    const size_t at = out.find("--- sequence 0");
    return at == std::string::npos ? std::string() : out.substr(at, out.find("\n[", at) - at);
  };
  EXPECT_NE(answers(off.out), "") << off.out;
  EXPECT_EQ(answers(on.out), answers(off.out));
  EXPECT_EQ(answers(lru.out), answers(off.out));
  EXPECT_NE(on.out.find("prefix cache:"), std::string::npos) << on.out;
  EXPECT_EQ(off.out.find("prefix cache:"), std::string::npos) << off.out;
}

}  // namespace
}  // namespace mpkv

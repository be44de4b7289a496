// End-to-end: greedy output of the real model is the same at -t 1, 2 and 3, and a sequence decoded
// in a batch of three writes what it writes alone (docs/numerics.md, "Linear layers" and
// "Attention": before, -t 1 and -t 2 answered differently because prefill's sgemm and the attention
// row split depended on the thread count).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace mpkv {
namespace {

using test::run_cli;

const char* kPrompt = " --chat -p 'The capital of France is' -n 32 --temp 0";

// The generated text: every line except the run summaries ("[...]" lines) and empty lines.
std::string generated_text(const std::string& out) {
  std::istringstream in(out);
  std::string line, text;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '[') continue;
    text += line + "\n";
  }
  return text;
}

std::string generate(const std::string& model, const std::string& extra) {
  const auto r = run_cli("generate -m " + model + kPrompt + extra);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return generated_text(r.out);
}

TEST(CliThreads, GreedyOutputIndependentOfThreadCount) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  const std::string t1 = generate(m, " -t 1");
  ASSERT_FALSE(t1.empty());
  EXPECT_EQ(generate(m, " -t 2"), t1);
  EXPECT_EQ(generate(m, " -t 3"), t1);
}

TEST(CliThreads, GreedyOutputWithPackedCacheIndependentOfThreadCount) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  const std::string kv = " --kv-method kivi --kv-bits 4 --kv-window 8 --kv-page 32";
  const std::string t1 = generate(m, kv + " -t 1");
  ASSERT_FALSE(t1.empty());
  EXPECT_EQ(generate(m, kv + " -t 3"), t1);
}

// --parallel 3 prints "--- sequence i (...)" before each sequence's text; each must equal the text
// of the same prompt decoded alone.
TEST(CliThreads, SequenceInABatchWritesWhatItWritesAlone) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  const std::string alone = generate(m, " -t 1");
  const auto r = run_cli("generate -m " + m + kPrompt + " -t 2 --parallel 3");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::istringstream in(r.out);
  std::string line;
  std::vector<std::string> texts;
  while (std::getline(in, line)) {
    if (line.rfind("--- sequence", 0) == 0) {
      texts.emplace_back();
    } else if (!texts.empty() && !line.empty() && line[0] != '[') {
      texts.back() += line + "\n";
    }
  }
  ASSERT_EQ(texts.size(), 3u) << r.out;
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(texts[i], alone) << "sequence " << i;
}

}  // namespace
}  // namespace mpkv

// End-to-end: the `mpkv` binary as a user runs it. Bad input must give a clear message and a
// non-zero exit; the chat reply to "The capital of France is" must name Paris.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fixtures/tiny_model.h"
#include "test_support.h"
#include "tokenizer/utf8.h"

namespace mpkv {
namespace {

using test::run_cli;

std::string tiny_model() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/cli_tiny.gguf";
    test::write_tiny_model(p, test::TinyModelSpec{});
    return p;
  }();
  return path;
}

TEST(Cli, MissingModelFileIsAClearError) {
  const auto r = run_cli("generate -m /nonexistent/model.gguf -p hi -n 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("error: cannot open '/nonexistent/model.gguf'"), std::string::npos) << r.out;
}

TEST(Cli, NonGgufFileIsAClearError) {
  const std::string p = test::temp_dir() + "/not_a_model.txt";
  std::ofstream(p) << "hello, this is not a GGUF file at all\n";
  const auto r = run_cli("info -m " + p);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GGUF"), std::string::npos) << r.out;
}

TEST(Cli, PromptLongerThanContextIsAClearError) {
  const auto r = run_cli("generate -m " + tiny_model() + " -p 'this prompt is longer than eight tokens' -c 8 -n 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("the context holds 8"), std::string::npos) << r.out;
}

TEST(Cli, BadOptionValueIsRejected) {
  const auto r = run_cli("generate -m " + tiny_model() + " -p hi --top-p 1.5");
  EXPECT_NE(r.exit_code, 0);
}

TEST(Cli, TinyModelGeneratesAndReportsSpeed) {
  const auto r = run_cli("generate -m " + tiny_model() + " -p hello -n 5 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("decode"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tok/s"), std::string::npos) << r.out;
}

TEST(Cli, PplOnTooShortTextFailsWithoutWritingJson) {
  const std::string text = test::temp_dir() + "/short.txt";
  std::ofstream(text) << "too short";
  const std::string json = test::temp_dir() + "/ppl.json";
  std::filesystem::remove(json);
  const auto r = run_cli("ppl -m " + tiny_model() + " -f " + text + " -c 64 --json " + json);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("fewer than one window"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(json));
}

TEST(Cli, TokenizePrintsIds) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  const auto r = run_cli("tokenize -m " + m + " -p 'The capital of France is' --ids");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "504 3575 282 4649 314\n");
}

TEST(Cli, TokenizeGemmaPrintsIds) {
  const std::string m = test::gemma_model_path();
  if (m.empty()) GTEST_SKIP() << test::kGemmaModelAbsent;
  // llama.cpp's ids (llama-cpp-python 0.3.36, tokenize(add_bos=True)): <bos> first, no space prefix.
  const auto r = run_cli("tokenize -m " + m + " -p 'The capital of France is' --ids");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "2 818 5279 529 7001 563\n");
}

TEST(Cli, ChatAnswersParis) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  // A question whose greedy reply starts with "Paris" on every ISA tier. The earlier prompt ('The
  // capital of France is', 80 tokens) met a near-tie at its fifth reply token ("I'm" / "I am"), which
  // the scalar, AVX2 and AVX-512 kernels, and the repacked linear layers, break either way; only one
  // branch named Paris. Output never depends on -t (test_cli_threads.cpp), but may on the tier
  // (docs/numerics.md).
  const auto r =
      run_cli("generate -m " + m + " --chat -p 'Which city is the capital of France? Answer with one word.' -n 16 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
}

// A length stop in the middle of a character prints only whole characters (engine/text_stream.h).
// SmolLM2 spells "\xF0\x9F\x98\x80" in three tokens, and greedy decoding after a row of them
// continues the row, so 1 or 2 tokens end inside a character. stdout alone is checked (stderr to
// /dev/null; `| cat` keeps run_cli's 2>&1 off mpkv).
TEST(Cli, LengthStopInsideACharacterPrintsOnlyWholeCharacters) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  const std::string prompt = "\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80";
  for (int n : {1, 2, 3, 4}) {
    const auto r = run_cli("generate -m " + m + " -p '" + prompt + "' -n " + std::to_string(n) +
                           " --temp 0 -t 1 2>/dev/null | cat");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.rfind(prompt, 0), 0u) << "-n " << n << ": " << r.out;
    EXPECT_TRUE(utf8_is_valid(r.out)) << "-n " << n << ": " << r.out;
  }
}

// bench --kv-plan checks the plan's model identity like generate and ppl (the committed SmolLM2
// plan does not belong to the tiny model).
TEST(Cli, BenchWithPlanForAnotherModelIsAClearError) {
  const std::string plan = test::source_path("docs/results/plans/combined_2.5.json");
  ASSERT_TRUE(std::filesystem::exists(plan)) << plan;
  const auto r = run_cli("bench -m " + tiny_model() + " -t 1 --synthetic -d 64 -n 4 -r 1 -p 8 --kv-plan " + plan);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("KV plan is for another model"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("decode "), std::string::npos) << r.out;  // rejected before any work
}

// ppl under a tight progressive budget: 6 MiB is above sequence_bytes_bound(256) for SmolLM2 at
// 2 bits (5.93 MiB) but below a 256-token window at 16 bits, which the one-call prefill needed
// ("KV budget exhausted" before chunking); a 1024-token window does not fit (bound 8.68 MiB) and
// is a clear error.
TEST(Cli, PplWithProgressiveCacheUnderTightBudget) {
  const std::string m = test::default_model_path();
  const std::string wiki = test::shared_path("data/wikitext-2/test.txt");
  if (m.empty() || !std::filesystem::exists(wiki)) GTEST_SKIP() << "real model or WikiText-2 absent";
  const std::string text = test::temp_dir() + "/wiki_head.txt";
  {
    std::ifstream in(wiki);
    std::string head(4000, '\0');  // ~1100 tokens
    in.read(head.data(), (std::streamsize)head.size());
    std::ofstream(text) << head.substr(0, (size_t)in.gcount());
  }
  const std::string kv = " --chunks 1 -t 1 --kv-method progressive --kv-bits 2 --kv-budget-mib 6";
  auto r = run_cli("ppl -m " + m + " -f " + text + " -c 256" + kv);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("PPL = "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
  r = run_cli("ppl -m " + m + " -f " + text + " -c 1024" + kv);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("error: perplexity: the KV budget cannot hold one window of 1024 tokens"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace mpkv

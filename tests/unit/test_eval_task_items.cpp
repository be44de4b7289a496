// Task files (src/eval/task_items.h) and the prompt cuts of f16 at the budget (src/eval/task_run.h).
#include <gtest/gtest.h>

#include "eval/task_items.h"
#include "eval/task_run.h"
#include "util/error.h"

namespace mpkv {
namespace {

const char* kLine =
    R"({"id": "a", "task": "passkey", "prompt": "P", "answer": "5", "max_tokens": 12, "stop": ["\n"], )"
    R"("rule": "first_number", "length": 1024, "depth": 0.5})";

TEST(TaskItems, ParsesEveryField) {
  const auto items = parse_task_items(std::string(kLine) + "\n\n" +
                                          R"({"id": "b", "prompt": "Q", "answer": "7", "max_tokens": 3, "rule": "final_number"})",
                                      "t.jsonl");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].id, "a");
  EXPECT_EQ(items[0].task, "passkey");
  EXPECT_EQ(items[0].max_tokens, 12);
  ASSERT_EQ(items[0].stop.size(), 1u);
  EXPECT_EQ(items[0].stop[0], "\n");
  EXPECT_EQ(items[0].length, 1024);
  EXPECT_DOUBLE_EQ(items[0].depth, 0.5);
  EXPECT_EQ(items[1].rule, AnswerRule::final_number);
  EXPECT_TRUE(items[1].stop.empty());
}

void expect_error(const std::string& text, const std::string& part) {
  try {
    parse_task_items(text, "t.jsonl");
    FAIL() << "no error for: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(TaskItems, BadInputIsAnErrorNamingTheLine) {
  expect_error("", "no task items");
  expect_error("{not json", "t.jsonl:1: not valid JSON");
  expect_error(std::string(kLine) + "\n" + kLine, "t.jsonl:2: duplicate id 'a'");
  expect_error(R"({"id": "a", "prompt": "P", "answer": "5", "max_tokens": 12})", "t.jsonl:1: missing \"rule\"");
  expect_error(R"({"id": "a", "prompt": "", "answer": "5", "max_tokens": 1, "rule": "first_number"})", "empty \"prompt\"");
  expect_error(R"({"id": "a", "prompt": "P", "answer": "5", "max_tokens": 0, "rule": "first_number"})", "max_tokens");
  expect_error(R"({"id": "a", "prompt": "P", "answer": 5, "max_tokens": 1, "rule": "first_number"})", "\"answer\" must be a string");
  expect_error(R"({"id": "a", "prompt": "P", "answer": "5", "max_tokens": 1, "rule": "x"})", "unknown answer rule");
  expect_error(R"({"id": "a", "prompt": "P", "answer": "5", "max_tokens": 1, "rule": "first_number", "depth": 2})", "depth");
}

TEST(TaskRun, PromptCuts) {
  const std::vector<int32_t> p{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(fit_prompt(p, PromptPolicy::streaming, 5, 2, 1), (std::vector<int32_t>{1, 2, 8, 9, 10}));
  EXPECT_EQ(fit_prompt(p, PromptPolicy::truncate, 5, 2, 1), (std::vector<int32_t>{1, 7, 8, 9, 10}));
  EXPECT_EQ(fit_prompt(p, PromptPolicy::truncate, 3, 2, 0), (std::vector<int32_t>{8, 9, 10}));
  EXPECT_EQ(fit_prompt(p, PromptPolicy::full, 3, 2, 1), p);
  EXPECT_EQ(fit_prompt(p, PromptPolicy::streaming, 10, 2, 1), p);
}

TEST(TaskRun, F16TokensWithinIsTheLargestFit) {
  const KvDims dims(2, 4, 2, 16);
  const KvByteModel f16(dims, make_kv_plan(KvCacheOptions{}, dims));
  for (size_t bytes : {f16.sequence_bytes_bound(1), f16.sequence_bytes_bound(100) + 7, f16.sequence_bytes_bound(5000)}) {
    const int t = f16_tokens_within(f16, bytes);
    EXPECT_LE(f16.sequence_bytes_bound(t), bytes);
    EXPECT_GT(f16.sequence_bytes_bound(t + 1), bytes);
  }
  EXPECT_EQ(f16_tokens_within(f16, 0), 0);
}

}  // namespace
}  // namespace mpkv

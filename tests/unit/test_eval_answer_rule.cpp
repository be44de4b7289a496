// The answer rules of `mpkv eval --task` (src/eval/answer_rule.h, docs/accuracy_tasks.md "Scoring").
#include <gtest/gtest.h>

#include "eval/answer_rule.h"
#include "util/error.h"

namespace mpkv {
namespace {

std::string ex(const std::string& s, AnswerRule r) { return extract_answer(s, r).value_or("<none>"); }

TEST(AnswerRule, FirstNumber) {
  const AnswerRule r = AnswerRule::first_number;
  EXPECT_EQ(ex(" 48213. Remember it.", r), "48213");
  EXPECT_EQ(ex(" \"482913\", and 7", r), "482913");
  EXPECT_EQ(ex(" 1,200 apples", r), "1200");
  EXPECT_EQ(ex(" -12 degrees", r), "-12");
  EXPECT_EQ(ex(" a-5", r), "-5");  // '-' right before a digit is a sign
  EXPECT_EQ(ex(" 12.00", r), "12");
  EXPECT_EQ(ex(" 12.5", r), "12.5");
  EXPECT_EQ(ex(" 007", r), "7");
  EXPECT_EQ(ex(" -0", r), "0");
  EXPECT_EQ(ex(" 3,", r), "3");     // a trailing comma is punctuation
  EXPECT_EQ(ex(" 3. Next", r), "3");  // a full stop is not a decimal point
  EXPECT_EQ(ex(" the key is lost", r), "<none>");
  EXPECT_EQ(ex("", r), "<none>");
}

TEST(AnswerRule, FinalNumber) {
  const AnswerRule r = AnswerRule::final_number;
  EXPECT_EQ(ex(" 3 + 5 = 8. 8 - 2 = 6. The answer is 6.", r), "6");
  EXPECT_EQ(ex(" 2 * 4 = 8. the answer is 8. Q: 5 + 5 is 10", r), "8");  // the first phrase, case-insensitive
  EXPECT_EQ(ex(" 3 + 5 = 8. So Tom has 8", r), "8");                    // no phrase: the last number
  EXPECT_EQ(ex(" The answer is 1,024 coins", r), "1024");
  EXPECT_EQ(ex(" 7 apples. The answer is unknown", r), "<none>");        // phrase without a number after it
  EXPECT_EQ(ex(" nothing", r), "<none>");
}

TEST(AnswerRule, ExactMatch) {
  EXPECT_TRUE(answer_correct(" 48213.", AnswerRule::first_number, "48213"));
  EXPECT_FALSE(answer_correct(" 48231.", AnswerRule::first_number, "48213"));
  EXPECT_FALSE(answer_correct(" 482130", AnswerRule::first_number, "48213"));
  EXPECT_TRUE(answer_correct(" 10 + 5 = 15. The answer is 15.", AnswerRule::final_number, "15"));
  EXPECT_FALSE(answer_correct(" 10 + 5 = 15. The answer is 16.", AnswerRule::final_number, "15"));
  EXPECT_FALSE(answer_correct(" no number", AnswerRule::first_number, "15"));
  EXPECT_EQ(parse_answer_rule("final_number"), AnswerRule::final_number);
  EXPECT_THROW(parse_answer_rule("last"), Error);
}

}  // namespace
}  // namespace mpkv

// How a task's answer is read from the generated text (docs/accuracy_tasks.md "Scoring"), and exact
// match against the item's answer.
//
//   first_number  the first number in the text (retrieval: the prompt ends "... the pass key is")
//   final_number  the number right after the first "The answer is" (case-insensitive); when the
//                 text has no such phrase, the last number in the text (chain-of-thought)
// A number is an optional '-' directly before a digit, then digits with ',' between digit groups
// allowed (removed: "1,200" is 1200); a '.' followed by digits ends it only if they are all zeros
// ("12.00" is 12, "12.5" is no integer and is kept as "12.5"). Leading zeros are dropped ("007" is 7).
#pragma once
#include <optional>
#include <string>

namespace mpkv {

enum class AnswerRule { first_number, final_number };
// Error naming the rules unless `s` is "first_number" or "final_number" (an input error).
AnswerRule parse_answer_rule(const std::string& s);
const char* answer_rule_name(AnswerRule r);

// The answer as a normalized number string ("-12", "1200", "12.5"), or nothing when the text holds no number.
std::optional<std::string> extract_answer(const std::string& generated, AnswerRule rule);
// Exact match of the extracted answer with the item's answer (normalized the same way).
bool answer_correct(const std::string& generated, AnswerRule rule, const std::string& expected);

}  // namespace mpkv

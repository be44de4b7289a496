// Number extraction and exact match (answer_rule.h has the rule).
#include "eval/answer_rule.h"

#include <cctype>
#include <vector>

#include "util/error.h"

namespace mpkv {

namespace {

bool digit(char ch) { return std::isdigit((unsigned char)ch) != 0; }

struct NumberAt {
  size_t begin = 0;
  std::string value;  // normalized
};

// Reads the number starting at s[i] (a digit, or '-' before one); advances i past it.
std::string read_number(const std::string& s, size_t& i) {
  std::string sign, digits, frac;
  if (s[i] == '-') {
    sign = "-";
    ++i;
  }
  while (i < s.size()) {
    if (digit(s[i])) digits += s[i++];
    else if (s[i] == ',' && i + 1 < s.size() && digit(s[i + 1]) && !digits.empty()) ++i;
    else break;
  }
  if (i + 1 < s.size() && s[i] == '.' && digit(s[i + 1])) {
    ++i;
    while (i < s.size() && digit(s[i])) frac += s[i++];
  }
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  size_t nz = 0;
  while (nz + 1 < digits.size() && digits[nz] == '0') ++nz;
  std::string v = digits.substr(nz) + (frac.empty() ? "" : "." + frac);
  if (v == "0") sign.clear();
  return sign + v;
}

std::vector<NumberAt> numbers_in(const std::string& s) {
  std::vector<NumberAt> out;
  for (size_t i = 0; i < s.size();) {
    const bool starts = digit(s[i]) || (s[i] == '-' && i + 1 < s.size() && digit(s[i + 1]));
    if (!starts) {
      ++i;
      continue;
    }
    const size_t b = i;
    out.push_back({b, read_number(s, i)});
  }
  return out;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = (char)std::tolower((unsigned char)ch);
  return s;
}

}  // namespace

AnswerRule parse_answer_rule(const std::string& s) {
  if (s == "first_number") return AnswerRule::first_number;
  if (s == "final_number") return AnswerRule::final_number;
  throw Error("unknown answer rule '" + s + "' (first_number, final_number)");
}

const char* answer_rule_name(AnswerRule r) { return r == AnswerRule::first_number ? "first_number" : "final_number"; }

std::optional<std::string> extract_answer(const std::string& generated, AnswerRule rule) {
  const std::vector<NumberAt> nums = numbers_in(generated);
  if (nums.empty()) return std::nullopt;
  if (rule == AnswerRule::first_number) return nums.front().value;
  const std::string phrase = "the answer is";
  const size_t at = lower(generated).find(phrase);
  if (at == std::string::npos) return nums.back().value;
  for (const NumberAt& n : nums)
    if (n.begin >= at + phrase.size()) return n.value;
  return std::nullopt;  // the phrase, but no number after it
}

bool answer_correct(const std::string& generated, AnswerRule rule, const std::string& expected) {
  const auto got = extract_answer(generated, rule);
  const auto want = extract_answer(expected, AnswerRule::first_number);
  return got && want && *got == *want;
}

}  // namespace mpkv

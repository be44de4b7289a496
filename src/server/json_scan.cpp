#include "server/json_scan.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mpkv::server {

size_t json_container_end(std::string_view s, size_t pos) {
  if (pos >= s.size() || (s[pos] != '{' && s[pos] != '[')) return std::string_view::npos;
  std::vector<char> closers;  // the closing brackets still owed, innermost last
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{') closers.push_back('}');
    else if (c == '[') closers.push_back(']');
    else if (c == '}' || c == ']') {
      if (closers.empty() || closers.back() != c) return std::string_view::npos;  // mismatched: not JSON
      closers.pop_back();
      if (closers.empty()) return i + 1;
    }
  }
  return std::string_view::npos;
}

size_t skip_json_space(std::string_view s, size_t pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r')) ++pos;
  return pos;
}

namespace {
bool json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool number_char(char c) { return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }
bool hex_char(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
}  // namespace

JsonScanner::Byte JsonScanner::start_value(char c) {
  began_value_ = true;
  switch (c) {
    case '"': state_ = S::string; key_ = false; return Byte::token;
    case '{': stack_.push_back('{'); state_ = S::key_or_close; return Byte::token;
    case '[': stack_.push_back('['); state_ = S::value_or_close; return Byte::token;
    case 't': literal_ = "rue"; break;
    case 'f': literal_ = "alse"; break;
    case 'n': literal_ = "ull"; break;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) { state_ = S::number; return Byte::token; }
      began_value_ = false;
      state_ = S::error;
      return Byte::error;
  }
  state_ = S::literal;
  left_ = static_cast<int>(std::strlen(literal_));
  return Byte::token;
}

void JsonScanner::after_value() { state_ = stack_.empty() ? S::done : S::comma_or_close; }

JsonScanner::Byte JsonScanner::feed(char c) {
  began_value_ = false;
  switch (state_) {
    case S::string:
      if (c == '"') {
        if (key_) state_ = S::colon;
        else after_value();
      } else if (c == '\\') {
        state_ = S::escape;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        state_ = S::error;
        return Byte::error;
      }
      return Byte::token;
    case S::escape:
      if (c == 'u') {
        state_ = S::unicode;
        left_ = 4;
        return Byte::token;
      }
      if (!std::strchr("\"\\/bfnrt", c) || c == 0) {
        state_ = S::error;
        return Byte::error;
      }
      state_ = S::string;
      return Byte::token;
    case S::unicode:
      if (!hex_char(c)) {
        state_ = S::error;
        return Byte::error;
      }
      if (--left_ == 0) state_ = S::string;
      return Byte::token;
    case S::literal:
      if (c != literal_[0]) {
        state_ = S::error;
        return Byte::error;
      }
      ++literal_;
      if (--left_ == 0) after_value();
      return Byte::token;
    case S::number:
      if (number_char(c)) return Byte::token;
      after_value();  // the number ended before c: c is read in the state after it
      return feed(c);
    case S::done: return Byte::after_end;
    case S::error: return Byte::error;
    default: break;
  }
  if (json_space(c)) return Byte::space;
  switch (state_) {
    case S::value: return start_value(c);
    case S::value_or_close:
      if (c == ']') {
        stack_.pop_back();
        after_value();
        return Byte::token;
      }
      return start_value(c);
    case S::key_or_close:
      if (c == '}') {
        stack_.pop_back();
        after_value();
        return Byte::token;
      }
      [[fallthrough]];
    case S::key:
      if (c != '"') break;
      state_ = S::string;
      key_ = true;
      return Byte::token;
    case S::colon:
      if (c != ':') break;
      state_ = S::value;
      return Byte::token;
    case S::comma_or_close:
      if (c == ',') {
        state_ = stack_.back() == '{' ? S::key : S::value;
        return Byte::token;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        after_value();
        return Byte::token;
      }
      break;
    default: break;
  }
  state_ = S::error;
  return Byte::error;
}

std::string minify_json(std::string_view s) {
  JsonScanner scan;
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (scan.feed(c) == JsonScanner::Byte::token) out.push_back(c);
  return out;
}

namespace {
// The index just past the JSON value that starts at s[pos] (valid JSON assumed).
size_t value_end(std::string_view s, size_t pos) {
  if (s[pos] == '{' || s[pos] == '[') return json_container_end(s, pos);
  if (s[pos] == '"') {
    for (size_t i = pos + 1; i < s.size(); ++i) {
      if (s[i] == '\\') ++i;
      else if (s[i] == '"') return i + 1;
    }
    return s.size();
  }
  while (pos < s.size() && !json_space(s[pos]) && s[pos] != ',' && s[pos] != '}' && s[pos] != ']') ++pos;
  return pos;
}
}  // namespace

std::vector<std::pair<std::string, std::string_view>> json_object_members(std::string_view s) {
  std::vector<std::pair<std::string, std::string_view>> out;
  size_t pos = skip_json_space(s, 1);
  while (pos < s.size() && s[pos] == '"') {
    const size_t key_end = value_end(s, pos);
    std::string key = nlohmann::json::parse(s.substr(pos, key_end - pos)).get<std::string>();
    pos = skip_json_space(s, skip_json_space(s, key_end) + 1);  // past ':'
    const size_t end = value_end(s, pos);
    out.emplace_back(std::move(key), s.substr(pos, end - pos));
    pos = skip_json_space(s, end);
    if (pos < s.size() && s[pos] == ',') pos = skip_json_space(s, pos + 1);
  }
  return out;
}

}  // namespace mpkv::server

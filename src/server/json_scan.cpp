#include "server/json_scan.h"

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

}  // namespace mpkv::server

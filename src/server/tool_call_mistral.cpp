// Mistral calls (tool_call_format.h), two spellings after the [TOOL_CALLS] token:
//   Nemo:       [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abc123def"}, ...]
//   Small 3.2:  [TOOL_CALLS]f[ARGS]{...} once per call (Devstral too).
#include <cctype>
#include <nlohmann/json.hpp>

#include "server/json_scan.h"
#include "server/tool_call_parse.h"

namespace mpkv::server {

namespace {
constexpr std::string_view kStart = "[TOOL_CALLS]", kArgs = "[ARGS]";

// [{...}, {...}] at s[pos]; advances pos past the ']'.
bool read_call_array(std::string_view s, size_t& pos, ParsedBlock& out) {
  ++pos;  // '['
  for (;;) {
    pos = skip_json_space(s, pos);
    std::optional<ParsedToolCall> call = read_call_object(s, pos, {"arguments", "parameters"});
    if (!call) return false;
    out.calls.push_back(std::move(*call));
    pos = skip_json_space(s, pos);
    if (pos < s.size() && s[pos] == ',') { ++pos; continue; }
    if (pos < s.size() && s[pos] == ']') { ++pos; return true; }
    return false;
  }
}

// name[ARGS]{...} at s[pos]; advances pos past the object.
bool read_name_args(std::string_view s, size_t& pos, ParsedBlock& out) {
  const size_t args = s.find(kArgs, pos);
  if (args == std::string_view::npos || args == pos) return false;
  ParsedToolCall call;
  call.name = std::string(s.substr(pos, args - pos));
  for (char c : call.name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  size_t at = args + kArgs.size();
  const size_t end = json_container_end(s, at);
  if (end == std::string_view::npos || s[at] != '{') return false;
  const auto j = nlohmann::ordered_json::parse(s.substr(at, end - at), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  call.arguments = minify_json(s.substr(at, end - at));  // the model's own text (tool_call_parse.h)
  out.calls.push_back(std::move(call));
  pos = end;
  return true;
}
}  // namespace

std::optional<ParsedBlock> parse_mistral_block(std::string_view s) {
  ParsedBlock out;
  size_t pos = 0;
  while (s.substr(pos, kStart.size()) == kStart) {
    pos = skip_json_space(s, pos + kStart.size());
    const bool ok = pos < s.size() && s[pos] == '[' ? read_call_array(s, pos, out) : read_name_args(s, pos, out);
    if (!ok) return std::nullopt;
    const size_t next = skip_json_space(s, pos);
    if (s.substr(next, kStart.size()) == kStart) pos = next;
  }
  if (out.calls.empty()) return std::nullopt;
  out.trailing = std::string(s.substr(pos));
  return out;
}

}  // namespace mpkv::server

// Hermes-style calls (Qwen 2.5 / 3, QwQ, Hermes 2 / 3, SmolLM3; tool_call_format.h):
//   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   one block per call, space between.
#include "server/json_scan.h"
#include "server/tool_call_parse.h"

namespace mpkv::server {

std::optional<ParsedBlock> parse_hermes_block(std::string_view s) {
  constexpr std::string_view open = "<tool_call>", close = "</tool_call>";
  ParsedBlock out;
  size_t pos = 0;
  while (s.substr(pos, open.size()) == open) {
    pos = skip_json_space(s, pos + open.size());
    std::optional<ParsedToolCall> call = read_call_object(s, pos, {"arguments", "parameters"});
    if (!call) return std::nullopt;
    pos = skip_json_space(s, pos);
    if (s.substr(pos, close.size()) != close) return std::nullopt;
    out.calls.push_back(std::move(*call));
    const size_t next = skip_json_space(s, pos + close.size());
    pos = s.substr(next, open.size()) == open ? next : pos + close.size();
  }
  if (out.calls.empty()) return std::nullopt;
  out.trailing = std::string(s.substr(pos));
  return out;
}

}  // namespace mpkv::server

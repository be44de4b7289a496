// Llama 3.x JSON calls (tool_call_format.h): the answer is {"name": "f", "parameters": {...}}
// (Llama 3.2's template asks for exactly this), optionally after <|python_tag|> or after text that
// ends where the answer's first '{' begins (chat_output.cpp then wants the calls to end the answer);
// several calls are separated by ';' or space.
#include "server/json_scan.h"
#include "server/tool_call_parse.h"

namespace mpkv::server {

JsonCallStart llama3_json_start(std::string_view s) {
  const size_t end = json_container_end(s, 0);
  if (end == std::string_view::npos) {
    // Not closed yet (or not JSON at all): a call's first key comes right after the '{', so any
    // other character there settles it now rather than at the end of the answer.
    const size_t key = skip_json_space(s, 1);
    return key < s.size() && s[key] != '"' ? JsonCallStart::not_call : JsonCallStart::undecided;
  }
  size_t pos = 0;
  return read_call_object(s, pos, {"parameters", "arguments"}) ? JsonCallStart::call : JsonCallStart::not_call;
}

std::optional<ParsedBlock> parse_llama3_block(std::string_view s) {
  constexpr std::string_view python_tag = "<|python_tag|>";
  size_t pos = 0;
  if (s.substr(0, python_tag.size()) == python_tag) pos = python_tag.size();
  ParsedBlock out;
  for (;;) {
    pos = skip_json_space(s, pos);
    if (pos >= s.size() || s[pos] != '{') break;
    std::optional<ParsedToolCall> call = read_call_object(s, pos, {"parameters", "arguments"});
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    const size_t next = skip_json_space(s, pos);
    if (next < s.size() && s[next] == ';') pos = next + 1;
  }
  if (out.calls.empty()) return std::nullopt;
  out.trailing = std::string(s.substr(pos));
  return out;
}

}  // namespace mpkv::server

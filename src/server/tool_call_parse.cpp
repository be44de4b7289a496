#include "server/tool_call_parse.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "server/json_scan.h"

namespace mpkv::server {

namespace {
using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesStart = "<tool_call>";
constexpr std::string_view kMistralStart = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

MarkupScan scan_marker(std::string_view content, std::string_view marker) {
  MarkupScan m;
  m.start = content.find(marker);
  if (m.start == std::string_view::npos) m.hold = partial_marker_suffix(content, marker);
  return m;
}
}  // namespace

size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

MarkupScan scan_tool_call_start(ToolCallFormat f, std::string_view content, bool first_brace_open) {
  switch (f) {
    case ToolCallFormat::none: return {};
    case ToolCallFormat::hermes: return scan_marker(content, kHermesStart);
    case ToolCallFormat::mistral: return scan_marker(content, kMistralStart);
    case ToolCallFormat::llama3_json: {
      MarkupScan m = scan_marker(content, kPythonTag);
      if (!first_brace_open) return m;
      // A bare JSON call may follow text ("Sure: {...}", as llama.cpp reads Llama 3.x answers), but
      // only at the answer's first '{': whichever of the two comes first begins the block.
      const size_t brace = content.find('{');
      if (brace != std::string_view::npos && (m.start == std::string_view::npos || brace < m.start)) return {brace, 0};
      return m;
    }
  }
  return {};
}

std::optional<ParsedBlock> parse_tool_call_block(ToolCallFormat f, std::string_view block) {
  switch (f) {
    case ToolCallFormat::none: return std::nullopt;
    case ToolCallFormat::hermes: return parse_hermes_block(block);
    case ToolCallFormat::llama3_json: return parse_llama3_block(block);
    case ToolCallFormat::mistral: return parse_mistral_block(block);
  }
  return std::nullopt;
}

// Validity is the JSON parser's; the members are read from the text, first occurrence of a key
// first, so the arguments are the model's own text (minify_json) and agree with what the tool-call
// streamer (tool_call_stream.h) sent of them while they were generated.
std::optional<ParsedToolCall> read_call_object(std::string_view s, size_t& pos, std::initializer_list<const char*> args_keys) {
  const size_t end = json_container_end(s, pos);
  if (end == std::string_view::npos || s[pos] != '{') return std::nullopt;
  const std::string_view text = s.substr(pos, end - pos);
  const ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  ParsedToolCall call;
  bool has_name = false, has_args = false, has_id = false;
  for (const auto& [key, value] : json_object_members(text)) {
    if (key == "name" && !has_name) {
      has_name = true;
      const ojson v = ojson::parse(value);
      if (!v.is_string()) return std::nullopt;
      call.name = v.get<std::string>();
    } else if (key == "id" && !has_id) {
      has_id = true;
      const ojson v = ojson::parse(value);
      if (v.is_string()) call.id = v.get<std::string>();
    } else if (!has_args &&
               std::find_if(args_keys.begin(), args_keys.end(), [&](const char* k) { return key == k; }) != args_keys.end()) {
      has_args = true;
      if (value[0] == '{') {
        call.arguments = minify_json(value);
      } else if (value[0] == '"') {  // arguments written as a string of JSON
        const std::string inner = ojson::parse(value).get<std::string>();
        const ojson obj = ojson::parse(inner, nullptr, false);
        if (obj.is_discarded() || !obj.is_object()) return std::nullopt;
        call.arguments = minify_json(inner);
      } else {
        return std::nullopt;
      }
    }
  }
  if (call.name.empty()) return std::nullopt;
  if (!has_args) call.arguments = "{}";
  pos = end;
  return call;
}

}  // namespace mpkv::server

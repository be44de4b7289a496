#include "server/tool_call_parse.h"

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

std::optional<ParsedToolCall> read_call_object(std::string_view s, size_t& pos, std::initializer_list<const char*> args_keys) {
  const size_t end = json_container_end(s, pos);
  if (end == std::string_view::npos || s[pos] != '{') return std::nullopt;
  const ojson j = ojson::parse(s.substr(pos, end - pos), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ParsedToolCall call;
  call.name = j["name"].get<std::string>();
  if (call.name.empty()) return std::nullopt;
  call.arguments = "{}";
  for (const char* key : args_keys) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (it->is_string()) {  // arguments written as a string of JSON
      const ojson inner = ojson::parse(it->get<std::string>(), nullptr, false);
      if (inner.is_discarded() || !inner.is_object()) return std::nullopt;
      call.arguments = inner.dump();
    } else if (it->is_object()) {
      call.arguments = it->dump();
    } else {
      return std::nullopt;
    }
    break;
  }
  if (auto id = j.find("id"); id != j.end() && id->is_string()) call.id = id->get<std::string>();
  pos = end;
  return call;
}

}  // namespace mpkv::server

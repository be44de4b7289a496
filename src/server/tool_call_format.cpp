#include "server/tool_call_format.h"

#include "server/json_scan.h"

namespace mpkv::server {

namespace {
bool has(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }
}  // namespace

const char* to_string(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::none: return "none";
    case ToolCallFormat::hermes: return "hermes";
    case ToolCallFormat::llama3_json: return "llama3_json";
    case ToolCallFormat::mistral: return "mistral";
  }
  return "?";
}

// The markers each format's templates write (llama.cpp's common/chat.cpp tells the same templates
// apart by these strings). Qwen3-Coder's XML calls (<tool_call><function=...>) are another format,
// not read here.
ToolCallFormat detect_tool_call_format(std::string_view src) {
  if (has(src, "[TOOL_CALLS]")) return ToolCallFormat::mistral;
  if (has(src, "<tool_call>")) return has(src, "<function=") ? ToolCallFormat::none : ToolCallFormat::hermes;
  if (has(src, "<|start_header_id|>") && has(src, "\"parameters\"")) return ToolCallFormat::llama3_json;
  return ToolCallFormat::none;
}

bool template_has_thinking(std::string_view src) { return has(src, kThinkStart) && has(src, kThinkEnd); }

bool prompt_opens_thinking(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkStart);
  if (open == std::string_view::npos) return false;
  const size_t after = open + kThinkStart.size();
  return skip_json_space(prompt, after) == prompt.size();  // nothing but whitespace after the tag
}

}  // namespace mpkv::server

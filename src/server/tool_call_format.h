// How a model writes tool calls and thinking, chosen from its chat template's source as llama.cpp
// chooses its parser for the same templates (docs/serving.md, "Tool calls"; the golden cases in
// tests/golden/tool_calls/ are llama.cpp's parses of model outputs for those templates):
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block per call
//                (Qwen 2.5 / 3, QwQ, Hermes 2 / 3, SmolLM3);
//   llama3_json  {"name": ..., "parameters": {...}} as the answer, after <|python_tag|>, or ending
//                the answer after text at its first '{' (Llama 3.1 / 3.2 / 3.3);
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}, "id"?: ...}, ...] (Mistral Nemo) or
//                [TOOL_CALLS]name[ARGS]{...} per call (Mistral Small 3.2, Devstral);
//   none         the template has no tool-call markup this server reads: nothing is parsed.
#pragma once
#include <cstdint>
#include <string_view>

namespace mpkv::server {

enum class ToolCallFormat : uint8_t { none, hermes, llama3_json, mistral };
const char* to_string(ToolCallFormat f);

ToolCallFormat detect_tool_call_format(std::string_view template_source);

// Whether the template knows <think> ... </think> (Qwen3, QwQ, DeepSeek-R1 distills, SmolLM3).
bool template_has_thinking(std::string_view template_source);

// Whether a rendered prompt leaves a <think> block open (DeepSeek-R1 distills and QwQ end their
// generation prompt with "<think>\n"): the model's output then starts inside its thinking.
bool prompt_opens_thinking(std::string_view prompt);

inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";

}  // namespace mpkv::server

// The tool-calling fields of a chat request (docs/serving.md, "Tool calls"): `tools`,
// `tool_choice`, `parallel_tool_calls`, and the tool fields of history messages (an assistant's
// `tool_calls`, a `tool` message's `tool_call_id`). Read from the body parsed with key order kept
// (nlohmann::ordered_json): a tool's parameter schema and a call's arguments reach the chat template
// as the client wrote them, as llama.cpp keeps them. Every malformed value is an ApiError(400)
// naming the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace mpkv::server {

inline constexpr int kMaxTools = 128;            // tools in one request
inline constexpr int kMaxToolCallsPerMessage = 64;  // tool_calls of one history message
inline constexpr size_t kMaxToolNameBytes = 64;  // OpenAI's limit on a function name

// OpenAI's tool_choice values, a closed set. named: the one function in ToolRequest::named.
enum class ToolChoice : uint8_t { none, automatic, required, named };

struct ToolRequest {
  std::vector<ChatTool> tools;  // in the request's order; names unique
  ToolChoice choice = ToolChoice::none;  // default: automatic with tools, none without (OpenAI's)
  std::string named;                     // the function's name when choice == named
  bool parallel_tool_calls = true;       // OpenAI's default
};

// tools / tool_choice / parallel_tool_calls of a chat body (an object). Refuses `functions` and
// `function_call` (the deprecated form; docs/serving.md says why) when set.
ToolRequest parse_tool_request(const nlohmann::ordered_json& body);


// The tool fields of history message `index` (already checked to be an object with a string role):
// an assistant's tool_calls ([{"id"?, "type": "function", "function": {"name", "arguments"}}], the
// arguments a string of JSON or an object), a tool message's tool_call_id (required) and name.
// param: "messages[i]".
void parse_message_tool_fields(const nlohmann::ordered_json& msg, const std::string& role, const std::string& param,
                               ChatMessage& out);

}  // namespace mpkv::server

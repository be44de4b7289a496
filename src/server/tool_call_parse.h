// Tool calls in a model's output text (the formats of tool_call_format.h), pure functions over
// strings. A call's arguments are JSON text of an object: the model's own text without the
// whitespace between tokens (minify_json: keys, strings and numbers as written), OpenAI's
// `function.arguments` string, which a stream sends in pieces as they are generated
// (tool_call_stream.h). Text that is not a well-formed call of the format is
// not a call: it stays content, as llama.cpp leaves output its parser does not accept.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_format.h"

namespace mpkv::server {

struct ParsedToolCall {
  std::string id;         // the model's own id (Mistral Nemo writes one), else "" (the server makes one)
  std::string name;
  std::string arguments;  // JSON object text
};

// Where tool-call markup begins in `content` (content released so far is not in it). start == npos:
// none yet, and the last `hold` bytes must be held back because more text may make them the start of
// a call. first_brace_open (llama3_json): no '{' came before in the answer, so the first '{' of
// `content` may begin a bare JSON call (llama3_json_start says whether it does).
struct MarkupScan {
  size_t start = std::string_view::npos;
  size_t hold = 0;
};
MarkupScan scan_tool_call_start(ToolCallFormat f, std::string_view content, bool first_brace_open);

// What the text from a Llama 3 answer's first '{' is, as far as it has been generated: a call object
// ({"name": ..., "parameters"|"arguments": {...}}), not one (so it is content and is released), or
// not known until more text comes (the object is not closed yet).
enum class JsonCallStart : uint8_t { undecided, call, not_call };
JsonCallStart llama3_json_start(std::string_view from_brace);

// The calls of a block of output that begins where scan_tool_call_start found markup, and what
// follows the last call (content). nullopt when the block is not well-formed calls of the format.
struct ParsedBlock {
  std::vector<ParsedToolCall> calls;
  std::string trailing;
};
std::optional<ParsedBlock> parse_tool_call_block(ToolCallFormat f, std::string_view block);

// One format each (tool_call_hermes.cpp, tool_call_llama3.cpp, tool_call_mistral.cpp).
std::optional<ParsedBlock> parse_hermes_block(std::string_view block);
std::optional<ParsedBlock> parse_llama3_block(std::string_view block);
std::optional<ParsedBlock> parse_mistral_block(std::string_view block);

// Shared by the formats: the JSON object at s[pos] as a call, its name under "name" and its
// arguments under the first of its keys that is one of `args_keys` (absent: {}); the first of a
// repeated key counts; advances pos past it. nullopt when s[pos] is not such an object.
std::optional<ParsedToolCall> read_call_object(std::string_view s, size_t& pos, std::initializer_list<const char*> args_keys);
// The length of the longest suffix of s that is a proper prefix of marker.
size_t partial_marker_suffix(std::string_view s, std::string_view marker);

}  // namespace mpkv::server

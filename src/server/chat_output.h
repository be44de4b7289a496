// A chat answer's text split into thinking, content and tool calls as it is generated
// (docs/serving.md, "Tool calls" and "Reasoning"). push() takes each new piece of text and returns
// what is now certain: thinking (between <think> and </think>, or from the start when the prompt
// opened the block), content (each from its first non-space: the whitespace after a thinking
// tag is the block's layout), and nothing of a tool-call block until finish(), which parses it
// (tool_call_parse.h) into calls, or gives it back as content when it is not well-formed. Text that
// may still turn into a tag or a call's start is held back, so a stream never shows markup that
// later turns out to be a call. A non-streaming answer is the same calls: everything pushed, then
// finish(), the deltas summed.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_parse.h"
#include "server/tool_request.h"

namespace mpkv::server {

struct ChatOutputOptions {
  ToolCallFormat tools = ToolCallFormat::none;  // none: tool calls are not parsed (no tools, tool_choice none)
  bool parallel_tool_calls = true;              // false: only the first call is kept
  bool thinking = false;                        // the template has <think> ... </think>
  bool starts_in_thinking = false;              // the prompt opened <think> (prompt_opens_thinking)
  std::string call_id_prefix = "call_";         // calls without the model's own id get prefix + index
  // tool_choice required / named: the answer was generated under forced_tool_call_schema(*forced)
  // (tool_schema.h), after the thinking when starts_in_thinking (split off first, as reasoning), and
  // is read whole by tool_calls_from_forced_output at finish(); nothing of the call is
  // released before (output that is not complete calls, e.g. cut by max_tokens, is content then).
  std::shared_ptr<const ToolRequest> forced;
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ParsedToolCall> tool_calls;  // only from finish()
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputOptions opts);
  ChatDelta push(std::string_view text);
  ChatDelta finish();
  bool has_tool_calls() const { return n_calls_ > 0; }

 private:
  enum class Phase : uint8_t { start, thinking, content, tool_block, forced };
  void step(ChatDelta& out);  // releases what pending_ makes certain in the current phase
  bool ends_answer_if_after_text(const ParsedBlock& block) const;
  void release_reasoning(std::string_view text, ChatDelta& out);
  void release_content(std::string_view text, ChatDelta& out);

  ChatOutputOptions opts_;
  Phase phase_;
  std::string pending_;          // text not yet released (whole tool block in Phase::tool_block)
  bool reasoning_started_ = false;  // non-space thinking released (whitespace before it is dropped)
  bool content_started_ = false;    // non-space content released (text before a Llama 3 call)
  bool first_brace_seen_ = false;   // the answer's first '{' was not a Llama 3 call: later ones are text
  size_t n_calls_ = 0;
};

}  // namespace mpkv::server

// A chat answer's text split into thinking, content and tool calls as it is generated
// (docs/serving.md, "Tool calls" and "Reasoning"). push() takes each new piece of text and returns
// what is now certain: thinking (between <think> and </think>, or from the start when the prompt
// opened the block), content (each from its first non-space: the whitespace after a thinking
// tag is the block's layout), and tool calls as deltas (tool_call_stream.h). Streamed (`stream`),
// a call's head goes out once its name and its arguments' first value are known and its arguments
// as they arrive; otherwise the calls come from finish(), whole. finish() parses the whole block
// (tool_call_parse.h), which is the authority: the rest of each call, or, for a block that is not
// well-formed calls, the whole block as content (streamed: the calls already sent stay, the text
// from where the block broke is content). Text that may still turn into a tag or a call's start is
// held back, so a stream never shows markup that later turns out to be a call. For well-formed output
// the deltas summed are the same answer however the text was split and whichever the mode.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_parse.h"
#include "server/tool_call_stream.h"
#include "server/tool_request.h"

namespace mpkv::server {

struct ChatOutputOptions {
  ToolCallFormat tools = ToolCallFormat::none;  // none: tool calls are not parsed (no tools, tool_choice none)
  bool parallel_tool_calls = true;              // false: only the first call is kept (call_complete())
  bool stream = false;                          // tool-call deltas as the calls are generated
  bool thinking = false;                        // the template has <think> ... </think>
  bool starts_in_thinking = false;              // the prompt opened <think> (prompt_opens_thinking)
  std::string call_id_prefix = "call_";         // calls without the model's own id get prefix + index
  // tool_choice required / named: the answer was generated under forced_tool_call_schema(*forced)
  // (tool_schema.h), after the thinking when starts_in_thinking (split off first, as reasoning);
  // streamed as the auto calls are, and read whole by tool_calls_from_forced_output at finish()
  // (output that is not complete calls, e.g. cut by max_tokens, is content then, less what a stream
  // already sent as a call).
  std::shared_ptr<const ToolRequest> forced;
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;  // apply_tool_call_deltas assembles them
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputOptions opts);
  ChatDelta push(std::string_view text);
  ChatDelta finish();
  bool has_tool_calls() const { return n_calls_ > 0; }
  // The answer's first tool call is complete (auto mode; not a Llama 3 call after text, which is a
  // call only if it ends the answer): with parallel_tool_calls false, nothing after it is used, so
  // the generation can stop (Completion does).
  bool call_complete() const { return streamer_ && stream_arguments_ && streamer_->n_complete() > 0; }

 private:
  enum class Phase : uint8_t { start, thinking, content, tool_block, forced };
  void step(ChatDelta& out);  // releases what pending_ makes certain in the current phase
  bool ends_answer_if_after_text(const ParsedBlock& block) const;
  void release_reasoning(std::string_view text, ChatDelta& out);
  void release_content(std::string_view text, ChatDelta& out);
  void release_calls(std::vector<ToolCallDelta>& calls, ChatDelta& out);
  void finish_block(ChatDelta& out);
  void finish_calls(std::optional<ParsedBlock> block, ChatDelta& out);
  std::string call_id(size_t index, const std::string& own) const;

  ChatOutputOptions opts_;
  Phase phase_;
  std::string pending_;          // text not yet released (whole tool block in Phase::tool_block)
  bool reasoning_started_ = false;  // non-space thinking released (whitespace before it is dropped)
  bool content_started_ = false;    // non-space content released (text before a Llama 3 call)
  bool first_brace_seen_ = false;   // the answer's first '{' was not a Llama 3 call: later ones are text
  size_t n_calls_ = 0;              // calls whose head was released
  std::optional<ToolCallStreamer> streamer_;  // the tool block (Phase::tool_block)
  bool stream_arguments_ = false;
  size_t fed_ = 0;                  // bytes of pending_ fed to streamer_
};

}  // namespace mpkv::server

// A block of tool calls read as it is generated (docs/serving.md, "Tool calls"), so a stream sends
// each call's arguments while the model writes them: the block's bytes go in once each, in order, and
// out come deltas in OpenAI's shape, a call's head (its id when the model wrote one, and its name)
// then pieces of its arguments whose concatenation is the arguments text the whole-block parse gives
// (tool_call_parse.h: the model's JSON without the whitespace between tokens). Everything it decides
// depends on the bytes, never on how they were split into pieces.
//
// When a call goes out (is committed):
//   - as soon as its name is known and its arguments object has begun its first value (or closed
//     empty), when the format puts the name first (Hermes, Llama 3 JSON, Mistral's name[ARGS], and
//     the forced calls of tool_choice required / named); from then on every byte of the arguments
//     goes out as it arrives (only the whitespace between tokens is dropped). Waiting for the first
//     value keeps a call that breaks at once (`"arguments": {"city": </tool_call>`) whole as content;
//   - else when the call is complete, wrapper included (a Mistral Nemo array item, whose "id" follows
//     the arguments; arguments written as a string of JSON; "name" after the arguments).
// A byte that breaks the block's grammar stops it (broken_at()); what the answer makes of a block
// that is not well-formed calls is chat_output.cpp's business.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/json_scan.h"
#include "server/tool_call_parse.h"
#include "server/tool_request.h"

namespace mpkv::server {

// One piece of a streamed call: the head (first delta of call `index`: id, possibly empty, and name)
// and / or the next bytes of its arguments.
struct ToolCallDelta {
  size_t index = 0;
  bool head = false;
  std::string id, name;
  std::string arguments;
};

// The deltas appended to the calls they continue (how a client assembles a stream: by index).
void apply_tool_call_deltas(std::vector<ParsedToolCall>& calls, const std::vector<ToolCallDelta>& deltas);

class ToolCallStreamer {
 public:
  // stream_arguments false: nothing goes out, the block is only followed (a Llama 3 call after text
  // is a call only if it ends the answer, which is known at the end: chat_output.cpp sends it then).
  ToolCallStreamer(ToolCallFormat f, bool stream_arguments);
  // tool_choice required / named (tool_schema.h): the output is an array of {"name", "parameters"}
  // objects, or the named function's arguments object.
  static ToolCallStreamer forced(const ToolRequest& r);
  // The next bytes of the block (it begins where scan_tool_call_start found markup); new deltas are
  // appended to `out`.
  void feed(std::string_view bytes, std::vector<ToolCallDelta>& out);

  struct Call {
    size_t start = 0;        // block offset of the call's markup
    bool committed = false;  // its head went out
    bool complete = false;   // the call and its wrapper are whole
    std::string id, name;    // as sent in the head
    std::string sent;        // the arguments sent so far
  };
  const std::vector<Call>& calls() const { return calls_; }
  size_t n_complete() const { return n_complete_; }
  bool committed() const { return !calls_.empty() && calls_.front().committed; }
  // The block stopped being well-formed calls at this offset (npos: it has not).
  size_t broken_at() const { return broken_at_; }

 private:
  enum class W : uint8_t {
    marker,          // matching marker_ (then: next_)
    before_object,   // whitespace, then '{' of a call object
    object,          // inside a call object
    after_object,    // Hermes: whitespace, then </tool_call>
    between,         // whitespace, then the next call's marker or the end of the calls
    llama_between,   // whitespace, ';', whitespace, then '{' or the end
    mistral_after,   // after [TOOL_CALLS]: '[' of an array or a name
    mistral_name,    // name chars until [ARGS]
    mistral_args,    // the arguments object of name[ARGS]
    array_before,    // whitespace, then '{' of an array item
    array_after,     // whitespace, then ',' or ']'
    forced_array,    // whitespace, then '[' (tool_choice required)
    forced_args,     // whitespace, then the arguments object (tool_choice named)
    ended,           // the calls ended, text follows (the whole-block parse's trailing text)
    broken,
  };
  void byte(char c, std::vector<ToolCallDelta>& out);
  void object_byte(char c, std::vector<ToolCallDelta>& out);
  void args_byte(char c, JsonScanner::Byte kind, bool value_began, bool closed, std::vector<ToolCallDelta>& out);
  void begin_call();
  void start_marker(std::string_view marker, W next);
  void commit(const std::string& id, std::vector<ToolCallDelta>& out);
  void complete_call(std::vector<ToolCallDelta>& out);
  void break_here() { state_ = W::broken; broken_at_ = pos_; }

  ToolCallFormat format_;
  bool stream_arguments_;
  W state_ = W::marker, next_ = W::before_object;
  std::string_view marker_;
  size_t matched_ = 0;
  size_t pos_ = 0;  // block offset of the byte being read
  size_t broken_at_ = std::string_view::npos;
  std::vector<Call> calls_;
  size_t n_complete_ = 0;
  bool semicolon_seen_ = false;
  bool soft_ = false;      // a marker mismatch ends the calls (a marker between calls) instead of breaking them
  bool in_array_ = false;  // the call object is an array item
  bool array_ids_ = false; // array items may end with an "id" (Mistral Nemo): they go out whole
  std::string named_;      // tool_choice named: the function
  size_t end_of_last_ = 0; // block offset just past the last complete call

  // The call being read.
  JsonScanner scan_;
  std::string text_;         // its object's text (the name[ARGS] arguments for Mistral's other form)
  std::string key_;          // the depth-1 key being read (raw, quotes included)
  std::string last_key_;     // the last depth-1 key, decoded
  enum class Role : uint8_t { other, name, id, args } role_ = Role::other;
  std::string value_;        // the raw string value of "name" / "id"
  bool seen_name_ = false, seen_id_ = false, seen_args_ = false;
  std::string name_, id_;
  std::string pending_args_;  // arguments read before the head went out
  ParsedToolCall final_;      // the whole call, once its object closed
};

}  // namespace mpkv::server

// Response bodies in OpenAI's shapes (docs/serving.md, "Responses"): the JSON of a non-streaming
// chat.completion / text_completion, and the server-sent events of a stream:
//   data: {chunk}\n\n ... data: {chunk with finish_reason}\n\n [data: {usage chunk}\n\n] data: [DONE]\n\n
// Text that is not valid UTF-8 (a token piece cut inside a character) is written with U+FFFD.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/openai_request.h"

namespace mpkv::server {

// OpenAI's finish_reason: stop -> "stop"; length and context -> "length"; abort -> "abort"; a chat
// answer that stopped with tool calls: "tool_calls".
const char* openai_finish_reason(FinishReason r, bool tool_calls = false);

// Totals over the choices; cached_tokens: prompt tokens the engine read from its prefix cache
// (usage.prompt_tokens_details.cached_tokens; docs/serving.md "Prefix cache").
struct Usage {
  int prompt_tokens = 0, completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens read from the prefix cache (prompt_tokens_details)
};

// One token's log-probability with its text resolved (token pieces are bytes). A generated token,
// or with echo a prompt token; the first prompt token has none (null, as OpenAI writes it).
struct LogprobEntry {
  std::string token;
  std::optional<float> logprob;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

// One finished choice of a non-streaming response.
struct ChoiceResult {
  std::string text;  // chat: the content (thinking and tool calls taken out, chat_output.h)
  std::vector<LogprobEntry> logprobs;
  FinishReason reason = FinishReason::none;
  std::string reasoning;                   // chat: message.reasoning_content and message.reasoning
  std::vector<ParsedToolCall> tool_calls;  // chat: message.tool_calls
};

class ResponseFormatter {
 public:
  // id: "chatcmpl-..." or "cmpl-..."; created: Unix seconds; logprobs: whether choices carry them;
  // include_usage: stream chunks carry "usage": null and a usage chunk closes the stream;
  // n_choices: choices (index 0..n_choices-1: n per prompt).
  ResponseFormatter(Endpoint endpoint, std::string id, int64_t created, std::string model, bool logprobs,
                    bool include_usage, int n_choices = 1);

  // The whole non-streaming body: choices[i] has index i.
  std::string full(const std::vector<ChoiceResult>& choices, Usage usage) const;

  // Stream events. first(): chat's {"role": "assistant"} delta for each choice ("" for
  // completions); delta(): new
  // text of one choice (and its tokens' logprobs); last(): its empty delta with finish_reason;
  // usage(): the chunk with "choices": [] and the usage (only when include_usage).
  std::string first() const;
  std::string delta(int index, const std::string& text, const std::vector<LogprobEntry>& logprobs);
  std::string last(int index, FinishReason reason, bool tool_calls = false) const;
  // Chat streams whose answer is split (chat_output.h): a delta with content and/or
  // reasoning_content + reasoning (and the tokens' logprobs); and the tool calls as OpenAI streams
  // them, a call's head {"index", "id", "type", "function": {"name", "arguments": ""}}, then pieces
  // {"index", "function": {"arguments"}} (tool_call_stream.h), one chunk each.
  std::string chat_delta(int index, const ChatDelta& d, const std::vector<LogprobEntry>& logprobs);
  std::string tool_call_deltas(int index, const std::vector<ToolCallDelta>& calls) const;
  std::string usage(Usage usage) const;
  static std::string done() { return "data: [DONE]\n\n"; }
  static std::string error_event(const ApiError& e);

 private:
  std::string chunk(const nlohmann::json& choice) const;  // one SSE event around a choice

  Endpoint endpoint_;
  std::string id_, model_;
  int64_t created_;
  bool logprobs_, include_usage_;
  std::vector<size_t> text_offset_;  // per choice, completions' logprobs.text_offset: bytes so far
};

// "data: <json>\n\n"
std::string sse_event(const std::string& json);

}  // namespace mpkv::server

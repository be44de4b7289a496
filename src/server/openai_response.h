// Response bodies in OpenAI's shapes (docs/serving.md, "Responses"): the JSON of a non-streaming
// chat.completion / text_completion, and the server-sent events of a stream:
//   data: {chunk}\n\n ... data: {chunk with finish_reason}\n\n [data: {usage chunk}\n\n] data: [DONE]\n\n
// Text that is not valid UTF-8 (a token piece cut inside a character) is written with U+FFFD.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace mpkv::server {

// OpenAI's finish_reason: stop -> "stop"; length and context -> "length"; abort -> "abort".
const char* openai_finish_reason(FinishReason r);

struct Usage {
  int prompt_tokens = 0, completion_tokens = 0;
};

// One generated token's log-probability with its text resolved (token pieces are bytes).
struct LogprobEntry {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

class ResponseFormatter {
 public:
  // id: "chatcmpl-..." or "cmpl-..."; created: Unix seconds; logprobs: whether choices carry them;
  // include_usage: stream chunks carry "usage": null and a usage chunk closes the stream.
  ResponseFormatter(Endpoint endpoint, std::string id, int64_t created, std::string model, bool logprobs,
                    bool include_usage);

  // The whole non-streaming body.
  std::string full(const std::string& text, const std::vector<LogprobEntry>& logprobs, FinishReason reason,
                   Usage usage) const;

  // Stream events. first(): chat's {"role": "assistant"} delta ("" for completions); delta(): new
  // text (and its tokens' logprobs); last(): the empty delta with finish_reason; usage(): the
  // chunk with "choices": [] and the usage (only when include_usage).
  std::string first() const;
  std::string delta(const std::string& text, const std::vector<LogprobEntry>& logprobs);
  std::string last(FinishReason reason) const;
  std::string usage(Usage usage) const;
  static std::string done() { return "data: [DONE]\n\n"; }
  static std::string error_event(const ApiError& e);

 private:
  std::string chunk(const nlohmann::json& choice) const;  // one SSE event around a choice

  Endpoint endpoint_;
  std::string id_, model_;
  int64_t created_;
  bool logprobs_, include_usage_;
  size_t text_offset_ = 0;  // completions' logprobs.text_offset: bytes of generated text so far
};

// "data: <json>\n\n"
std::string sse_event(const std::string& json);

}  // namespace mpkv::server

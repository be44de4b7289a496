// Parsing and validation of OpenAI request bodies: POST /v1/chat/completions and POST
// /v1/completions (docs/serving.md, "Requests"). The result is a typed CompletionRequest; anything
// malformed (bad JSON, wrong types, out-of-range values, unknown roles, features this server does
// not implement set to a non-default value) throws ApiError(400) naming the field. Fields this
// server does not know are ignored, as OpenAI does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_format.h"

namespace mpkv::server {

enum class Endpoint : uint8_t { chat, completions };

inline constexpr int kMaxStopStrings = 4;
inline constexpr int kMaxLogprobs = 20;  // top_logprobs (chat) and logprobs (completions)

struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;                  // as sent ("" when absent); any name is accepted
  std::vector<ChatMessage> messages;  // chat: roles system / user / assistant ("developer" -> system)
  std::string prompt;                 // completions
  std::optional<int> max_tokens;      // max_completion_tokens, else max_tokens; >= 1
  float temperature = 1.0f;           // [0, 2]; OpenAI's default
  float top_p = 1.0f;                 // (0, 1]
  int top_k = 0;                      // >= 0 (-1 accepted as vLLM's "no limit"); 0: no limit
  std::optional<uint64_t> seed;       // int64 as sent, reinterpreted as uint64
  std::vector<std::string> stop;      // up to kMaxStopStrings non-empty strings
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int top_logprobs = -1;              // -1: no logprobs; else alternatives per token (0..kMaxLogprobs)
};

// Throws ApiError(400) for anything malformed.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body);

}  // namespace mpkv::server

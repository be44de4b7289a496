// Parsing and validation of OpenAI request bodies: POST /v1/chat/completions and POST
// /v1/completions (docs/serving.md, "Requests"), and of /tokenize and /detokenize (llama-server's
// and vLLM's shapes). The result is a typed CompletionRequest; anything
// malformed (bad JSON, wrong types, out-of-range values, unknown roles, features this server does
// not implement set to a non-default value) throws ApiError(400) naming the field. Top-level fields
// this server does not know are accepted, as OpenAI and vLLM do, and listed in unknown_fields (the
// server counts them in a metric). kKnownFields in openai_request.cpp is the one list of names read.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/constraint.h"
#include "server/reasoning_request.h"
#include "server/tool_request.h"
#include "tokenizer/chat_format.h"

namespace mpkv::server {

enum class Endpoint : uint8_t { chat, completions };

inline constexpr int kMaxStopStrings = 4;
inline constexpr int kMaxLogprobs = 20;      // top_logprobs (chat) and logprobs (completions)
inline constexpr int kMaxPrompts = 16;       // prompts in one /v1/completions request
inline constexpr int kMaxStopTokenIds = 64;  // stop_token_ids entries
inline constexpr int kMaxN = 16;             // n: choices per prompt
inline constexpr int kMaxChoices = 64;       // choices in one request (prompts x n)

// One prompt of /v1/completions: text, or token ids (checked against the vocabulary later).
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;                  // as sent ("" when absent); any name is accepted
  std::vector<ChatMessage> messages;  // chat: roles system / user / assistant / tool ("developer" -> system)
  std::vector<PromptInput> prompts;   // completions: 1..kMaxPrompts, n choices each
  int n = 1;                          // choices per prompt, 1..kMaxN (prompts x n <= kMaxChoices)
  bool echo = false;                  // completions: the prompt's text starts each choice's text
  std::optional<int> max_tokens;      // max_completion_tokens, else max_tokens; >= 1
  float temperature = 1.0f;           // [0, 2]; OpenAI's default
  float top_p = 1.0f;                 // (0, 1]
  int top_k = 0;                      // >= 0 (-1 accepted as vLLM's "no limit"); 0: no limit
  std::optional<uint64_t> seed;       // int64 as sent, reinterpreted as uint64
  std::vector<std::string> stop;      // up to kMaxStopStrings non-empty strings
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int top_logprobs = -1;              // -1: no logprobs; else alternatives per token (0..kMaxLogprobs)
  // vLLM's extra sampling fields.
  bool ignore_eos = false;            // keep going past end-of-generation tokens
  int min_tokens = 0;                 // >= 0 and <= max_tokens: no stop (EOS or stop string) before this many
  float repetition_penalty = 1.0f;    // > 0; the engine's repeat_penalty (last 64 tokens, docs/serving.md)
  float min_p = 0.0f;                 // [0, 1]
  std::vector<int32_t> stop_token_ids;  // ids >= 0, at most kMaxStopTokenIds
  int priority = 0;                   // waiting-queue order, lower first (vLLM)
  // OpenAI's logit adjustments (engine/sampler.h).
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;  // [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;          // ids >= 0 (keys are decimal strings), [-100, 100]
  // chat: chat_template_kwargs, an object whose entries become variables of the model's chat
  // template (docs/chat_templates.md); name -> the value's JSON text, sorted by name.
  std::vector<std::pair<std::string, std::string>> chat_template_kwargs;
  ToolRequest tools;            // chat: tools, tool_choice, parallel_tool_calls (tool_request.h)
  ReasoningRequest reasoning;   // chat: reasoning_format, include_reasoning, budget (reasoning_request.h)
  std::vector<std::string> unknown_fields;  // top-level names not in the known table (sorted)
  // What the output must match (grammar/constraint.h), and the field that asked for it (the param of
  // a 400 about it): set by the constraint fields (constraint_fields.h), or by any code that builds
  // a constraint for the request (a forced tool call's schema). The handler compiles it.
  std::optional<Constraint> constraint;
  std::string constraint_field;
};

// True when `name` is a top-level request field this server reads (either endpoint).
bool is_known_field(std::string_view name);

// Throws ApiError(400) for anything malformed.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body);

// POST /tokenize: llama-server's {"content", "add_special" (default false), "with_pieces"} or
// vLLM's {"prompt" | "messages", "add_special_tokens" (default true), "return_token_strs"}.
struct TokenizeRequest {
  bool chat = false;                  // vLLM's messages form (chat template + generation prompt)
  std::string text;
  std::vector<ChatMessage> messages;
  std::vector<std::pair<std::string, std::string>> chat_template_kwargs;  // vLLM: with messages, as chat's
  bool add_special = false;
  bool with_pieces = false;           // llama-server: tokens as [{"id", "piece"}]
  bool return_token_strs = false;     // vLLM: "token_strs" beside the ids
};
TokenizeRequest parse_tokenize_request(std::string_view body);

// POST /detokenize: {"tokens": [ids >= 0]} (both servers).
std::vector<int32_t> parse_detokenize_request(std::string_view body);

}  // namespace mpkv::server

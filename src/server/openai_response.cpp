#include "server/openai_response.h"

#include <nlohmann/json.hpp>

namespace mpkv::server {

namespace {
using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json usage_json(Usage u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
json chat_logprobs(const std::vector<LogprobEntry>& lps) {
  json content = json::array();
  for (const LogprobEntry& e : lps) {
    json top = json::array();
    for (const auto& [tok, lp] : e.top) top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
    content.push_back({{"token", e.token}, {"logprob", e.logprob.value()}, {"bytes", bytes_of(e.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"};
// an entry without a logprob (the first echoed prompt token) has null in both lists.
json tool_call_json(const ParsedToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

// message (non-streaming): content null when the answer is only tool calls, as OpenAI writes it;
// the thinking under both names (llama-server's reasoning_content, vLLM's reasoning).
json chat_message(const ChoiceResult& c) {
  json m = {{"role", "assistant"}, {"content", c.text.empty() && !c.tool_calls.empty() ? json(nullptr) : json(c.text)}};
  if (!c.reasoning.empty()) m["reasoning_content"] = m["reasoning"] = c.reasoning;
  if (!c.tool_calls.empty()) {
    m["tool_calls"] = json::array();
    for (const ParsedToolCall& t : c.tool_calls) m["tool_calls"].push_back(tool_call_json(t));
  }
  return m;
}

json completion_logprobs(const std::vector<LogprobEntry>& lps, size_t& offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (const LogprobEntry& e : lps) {
    tokens.push_back(e.token);
    token_lps.push_back(e.logprob ? json(*e.logprob) : json(nullptr));
    json top = e.logprob ? json::object() : json(nullptr);
    for (const auto& [tok, lp] : e.top) top[tok] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += e.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}
}  // namespace

const char* openai_finish_reason(FinishReason r, bool tool_calls) {
  switch (r) {
    case FinishReason::stop: return tool_calls ? "tool_calls" : "stop";
    case FinishReason::length:
    case FinishReason::context: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::none: break;
  }
  return nullptr;
}

std::string sse_event(const std::string& json_text) { return "data: " + json_text + "\n\n"; }

ResponseFormatter::ResponseFormatter(Endpoint endpoint, std::string id, int64_t created, std::string model,
                                     bool logprobs, bool include_usage, int n_choices)
    : endpoint_(endpoint), id_(std::move(id)), model_(std::move(model)), created_(created), logprobs_(logprobs),
      include_usage_(include_usage), text_offset_(static_cast<size_t>(n_choices), 0) {}

std::string ResponseFormatter::full(const std::vector<ChoiceResult>& choices, Usage usage) const {
  const bool chat = endpoint_ == Endpoint::chat;
  json out = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", openai_finish_reason(c.reason, !c.tool_calls.empty())}};
    size_t offset = 0;
    if (chat)
      choice["message"] = chat_message(c);
    else
      choice["text"] = c.text;
    choice["logprobs"] = !logprobs_ ? json(nullptr) : chat ? chat_logprobs(c.logprobs) : completion_logprobs(c.logprobs, offset);
    out.push_back(std::move(choice));
  }
  json body = {{"id", id_},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", model_},
               {"choices", out},
               {"usage", usage_json(usage)}};
  return dump(body);
}

std::string ResponseFormatter::chunk(const nlohmann::json& choice) const {
  json body = {{"id", id_},
               {"object", endpoint_ == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
               {"created", created_},
               {"model", model_},
               {"choices", json::array({choice})}};
  if (include_usage_) body["usage"] = nullptr;
  return sse_event(dump(body));
}

std::string ResponseFormatter::first() const {
  if (endpoint_ != Endpoint::chat) return "";
  std::string out;
  for (size_t i = 0; i < text_offset_.size(); ++i)
    out += chunk({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                  {"finish_reason", nullptr}});
  return out;
}

std::string ResponseFormatter::delta(int index, const std::string& text, const std::vector<LogprobEntry>& logprobs) {
  const bool chat = endpoint_ == Endpoint::chat;
  json choice = {{"index", index}, {"finish_reason", nullptr}};
  if (chat)
    choice["delta"] = {{"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = !logprobs_ ? json(nullptr) : chat ? chat_logprobs(logprobs) : completion_logprobs(logprobs, text_offset_.at(index));
  return chunk(choice);
}

std::string ResponseFormatter::chat_delta(int index, const ChatDelta& d, const std::vector<LogprobEntry>& logprobs) {
  json delta = json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.reasoning.empty()) delta["reasoning_content"] = delta["reasoning"] = d.reasoning;
  json choice = {{"index", index}, {"delta", delta}, {"finish_reason", nullptr}};
  choice["logprobs"] = logprobs_ ? chat_logprobs(logprobs) : json(nullptr);
  return chunk(choice);
}

std::string ResponseFormatter::tool_call_deltas(int index, const std::vector<ToolCallDelta>& calls) const {
  std::string out;
  auto send = [&](const json& tc) {
    out += chunk({{"index", index}, {"delta", {{"tool_calls", json::array({tc})}}}, {"logprobs", nullptr},
                  {"finish_reason", nullptr}});
  };
  for (const ToolCallDelta& c : calls) {
    if (c.head)
      send({{"index", c.index}, {"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", ""}}}});
    if (!c.arguments.empty()) send({{"index", c.index}, {"function", {{"arguments", c.arguments}}}});
  }
  return out;
}

std::string ResponseFormatter::last(int index, FinishReason reason, bool tool_calls) const {
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(reason, tool_calls)}};
  if (endpoint_ == Endpoint::chat)
    choice["delta"] = json::object();
  else
    choice["text"] = "";
  return chunk(choice);
}

std::string ResponseFormatter::usage(Usage u) const {
  json body = {{"id", id_},
               {"object", endpoint_ == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
               {"created", created_},
               {"model", model_},
               {"choices", json::array()},
               {"usage", usage_json(u)}};
  return sse_event(dump(body));
}

std::string ResponseFormatter::error_event(const ApiError& e) { return sse_event(error_body(e)); }

}  // namespace mpkv::server

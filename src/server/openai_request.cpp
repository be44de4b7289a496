#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace mpkv::server {

namespace {
using json = nlohmann::json;

// Every top-level field either endpoint reads (docs/serving.md, "Requests", lists them): the one
// table of known names. Anything else is accepted and reported in unknown_fields.
constexpr std::string_view kKnownFields[] = {
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
    "stop", "stream", "stream_options", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
    "logit_bias", "n", "best_of", "echo", "suffix", "tools", "functions", "response_format", "ignore_eos",
    "min_tokens", "repetition_penalty", "min_p"};

ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

// The field, or nullptr when absent or null (OpenAI treats an explicit null as "not given").
const json* field(const json& obj, const std::string& name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<bool> get_bool(const json& obj, const std::string& name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw bad(name, "'" + name + "' must be a boolean");
  return v->get<bool>();
}

// An integer in [lo, hi]; a number with a fraction, or a string, is a type error.
std::optional<int64_t> get_int(const json& obj, const std::string& name, int64_t lo, int64_t hi) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) throw bad(name, "'" + name + "' must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    throw bad(name, "'" + name + "' must be at most " + std::to_string(hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    throw bad(name, "'" + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                        std::to_string(x));
  return x;
}

std::optional<double> get_number(const json& obj, const std::string& name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw bad(name, "'" + name + "' must be a number");
  return v->get<double>();
}

std::optional<std::string> get_string(const json& obj, const std::string& name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad(name, "'" + name + "' must be a string");
  return v->get<std::string>();
}

// Features of the OpenAI API this server does not implement: absent or at their neutral value is
// fine; anything else is refused rather than silently ignored.
void reject_unsupported(const json& body, Endpoint endpoint) {
  for (const char* name : {"presence_penalty", "frequency_penalty"})
    if (auto x = get_number(body, name); x && *x != 0.0)
      throw bad(name, std::string("'") + name + "' is not supported by this server (only 0)");
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
    throw bad("logit_bias", "'logit_bias' is not supported by this server");
  if (auto n = get_int(body, "n", 1, std::numeric_limits<int32_t>::max()); n && *n != 1)
    throw bad("n", "only n = 1 is supported");
  if (endpoint == Endpoint::completions) {
    if (auto b = get_int(body, "best_of", 1, std::numeric_limits<int32_t>::max()); b && *b != 1)
      throw bad("best_of", "only best_of = 1 is supported");
    if (get_bool(body, "echo").value_or(false)) throw bad("echo", "'echo' is not supported by this server");
    if (auto s = get_string(body, "suffix"); s && !s->empty())
      throw bad("suffix", "'suffix' is not supported by this server");
  } else {
    for (const char* name : {"tools", "functions"})
      if (const json* v = field(body, name); v && !(v->is_array() && v->empty()))
        throw bad(name, std::string("'") + name + "' (tool calling) is not supported by this server");
    if (const json* v = field(body, "response_format")) {
      if (!v->is_object() || v->value("type", json()) != "text")
        throw bad("response_format", "only response_format {\"type\": \"text\"} is supported");
    }
  }
}

// content: a string, an array of {"type": "text", "text": ...} parts (joined with "\n"), or null
// for an assistant message.
std::string message_content(const json& msg, const std::string& role, const std::string& param) {
  const json* c = field(msg, "content");
  if (!c) {
    if (role == "assistant") return "";
    throw bad(param, "'" + param + "' is required for role '" + role + "'");
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) throw bad(param, "'" + param + "' must be a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const std::string pp = param + "[" + std::to_string(i) + "]";
    if (!part.is_object() || part.value("type", json()) != "text")
      throw bad(pp, "'" + pp + "' must be a {\"type\": \"text\"} part (only text content is supported)");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) throw bad(pp + ".text", "'" + pp + ".text' must be a string");
    if (i) text += '\n';
    text += t->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  const json* m = field(body, "messages");
  if (!m) throw bad("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) throw bad("messages", "'messages' must be a non-empty array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) throw bad(p, "'" + p + "' must be an object");
    const json* r = field(msg, "role");
    if (!r || !r->is_string()) throw bad(p + ".role", "'" + p + ".role' must be a string");
    std::string role = r->get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for system instructions
    if (role != "system" && role != "user" && role != "assistant")
      throw bad(p + ".role", "unsupported role '" + r->get<std::string>() + "' (system, developer, user, assistant)");
    out.push_back({role, message_content(msg, role, p + ".content")});
  }
  return out;
}

// prompt: a string, or an array holding exactly one string. Token-id prompts and batches of
// prompts are refused.
std::string parse_prompt(const json& body) {
  const json* p = field(body, "prompt");
  if (!p) throw bad("prompt", "'prompt' is required");
  if (p->is_string()) return p->get<std::string>();
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) return (*p)[0].get<std::string>();
  throw bad("prompt", "'prompt' must be a string (token-id prompts and several prompts per request are not supported)");
}

std::vector<std::string> parse_stop(const json& body) {
  const json* s = field(body, "stop");
  if (!s) return {};
  std::vector<std::string> out;
  if (s->is_string()) {
    out.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    if (s->size() > static_cast<size_t>(kMaxStopStrings))
      throw bad("stop", "'stop' holds at most " + std::to_string(kMaxStopStrings) + " strings");
    for (const json& x : *s) {
      if (!x.is_string()) throw bad("stop", "'stop' must be a string or an array of strings");
      out.push_back(x.get<std::string>());
    }
  } else {
    throw bad("stop", "'stop' must be a string or an array of strings");
  }
  for (const std::string& x : out)
    if (x.empty()) throw bad("stop", "'stop' strings must not be empty");
  return out;
}

void parse_sampling(const json& body, CompletionRequest& r) {
  if (auto t = get_number(body, "temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0)) throw bad("temperature", "'temperature' must be in [0, 2]");
    r.temperature = static_cast<float>(*t);
  }
  if (auto p = get_number(body, "top_p")) {
    if (!(*p > 0.0 && *p <= 1.0)) throw bad("top_p", "'top_p' must be in (0, 1]");
    r.top_p = static_cast<float>(*p);
  }
  if (auto k = get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max())) r.top_k = *k < 0 ? 0 : static_cast<int>(*k);
  if (auto s = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    r.seed = static_cast<uint64_t>(*s);
  const int64_t imax = std::numeric_limits<int32_t>::max();
  auto mt = get_int(body, "max_completion_tokens", 1, imax);
  if (!mt) mt = get_int(body, "max_tokens", 1, imax);
  if (mt) r.max_tokens = static_cast<int>(*mt);
  r.stop = parse_stop(body);
}

// vLLM's fields: ignore_eos, min_tokens (<= max_tokens when both are given), repetition_penalty, min_p.
void parse_vllm_sampling(const json& body, CompletionRequest& r) {
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  if (auto m = get_int(body, "min_tokens", 0, std::numeric_limits<int32_t>::max())) {
    if (r.max_tokens && *m > *r.max_tokens)
      throw bad("min_tokens", "'min_tokens' (" + std::to_string(*m) + ") must be at most 'max_tokens' (" +
                                  std::to_string(*r.max_tokens) + ")");
    r.min_tokens = static_cast<int>(*m);
  }
  if (auto p = get_number(body, "repetition_penalty")) {
    if (!(*p > 0.0 && std::isfinite(*p))) throw bad("repetition_penalty", "'repetition_penalty' must be > 0");
    r.repetition_penalty = static_cast<float>(*p);
  }
  if (auto p = get_number(body, "min_p")) {
    if (!(*p >= 0.0 && *p <= 1.0)) throw bad("min_p", "'min_p' must be in [0, 1]");
    r.min_p = static_cast<float>(*p);
  }
}

// Chat: logprobs (bool) + top_logprobs (0..20, needs logprobs). Completions: logprobs (0..20).
void parse_logprobs(const json& body, CompletionRequest& r) {
  if (r.endpoint == Endpoint::chat) {
    const bool on = get_bool(body, "logprobs").value_or(false);
    auto top = get_int(body, "top_logprobs", 0, kMaxLogprobs);
    if (top && !on) throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (on) r.top_logprobs = static_cast<int>(top.value_or(0));
  } else if (auto n = get_int(body, "logprobs", 0, kMaxLogprobs)) {
    r.top_logprobs = static_cast<int>(*n);
  }
}

void parse_streaming(const json& body, CompletionRequest& r) {
  r.stream = get_bool(body, "stream").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!r.stream) throw bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (!so->is_object()) throw bad("stream_options", "'stream_options' must be an object");
    r.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
}
}  // namespace

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body_text) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  CompletionRequest r;
  r.endpoint = endpoint;
  r.model = get_string(body, "model").value_or("");
  reject_unsupported(body, endpoint);
  if (endpoint == Endpoint::chat)
    r.messages = parse_messages(body);
  else
    r.prompt = parse_prompt(body);
  parse_sampling(body, r);
  parse_vllm_sampling(body, r);
  parse_logprobs(body, r);
  parse_streaming(body, r);
  for (const auto& item : body.items())
    if (!is_known_field(item.key())) r.unknown_fields.push_back(item.key());
  return r;
}

bool is_known_field(std::string_view name) {
  return std::find(std::begin(kKnownFields), std::end(kKnownFields), name) != std::end(kKnownFields);
}

}  // namespace mpkv::server

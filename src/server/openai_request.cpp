#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/constraint_fields.h"
#include "server/tool_schema.h"

namespace mpkv::server {

namespace {
using json = nlohmann::json;

// Every top-level field either endpoint reads (docs/serving.md, "Requests", lists them): the one
// table of known names. Anything else is accepted and reported in unknown_fields.
constexpr std::string_view kKnownFields[] = {
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
    "stop", "stream", "stream_options", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
    "logit_bias", "n", "best_of", "echo", "suffix", "tools", "functions", "ignore_eos",
    "min_tokens", "repetition_penalty", "min_p", "stop_token_ids", "priority", "chat_template_kwargs",
    "tool_choice", "parallel_tool_calls", "function_call", "reasoning_format", "include_reasoning",
    "reasoning_budget_tokens", "thinking_budget_tokens"};
// The fields that constrain the output (response_format and the peers' spellings) are read by
// constraint_fields.cpp, which lists them (constraint_field_names).

using request_fields::bad;
using request_fields::field;


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
// fine; anything else is refused rather than silently ignored. best_of = n selects nothing.
void reject_unsupported(const json& body, Endpoint endpoint, int n) {
  if (endpoint == Endpoint::completions) {
    if (auto b = get_int(body, "best_of", 1, std::numeric_limits<int32_t>::max()); b && *b != n)
      throw bad("best_of", "only best_of = n is supported (no choices are generated to be dropped)");
    if (auto s = get_string(body, "suffix"); s && !s->empty())
      throw bad("suffix", "'suffix' is not supported by this server");
    for (const char* name : {"tools", "tool_choice", "functions", "function_call"})
      if (field(body, name)) throw bad(name, std::string("'") + name + "' is only read by /v1/chat/completions");
  } else {
    if (get_bool(body, "echo").value_or(false)) throw bad("echo", "'echo' is only supported by /v1/completions");
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
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw bad(p + ".role", "unsupported role '" + r->get<std::string>() + "' (system, developer, user, assistant, tool)");
    out.push_back({role, message_content(msg, role, p + ".content")});
  }
  return out;
}

// chat_template_kwargs: {"name": any JSON value, ...} (llama-server's and vLLM's field), each entry a
// variable of the chat template. Absent or null: none.
std::vector<std::pair<std::string, std::string>> parse_chat_template_kwargs(const json& body) {
  const json* k = field(body, "chat_template_kwargs");
  if (!k) return {};
  if (!k->is_object()) throw bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : k->items()) out.emplace_back(name, value.dump());
  return out;
}

// An array of token ids, each in [0, 2^31); the vocabulary bound is checked where it is known.
std::vector<int32_t> token_ids(const json& a, const std::string& param) {
  if (!a.is_array()) throw bad(param, "'" + param + "' must be an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json& x : a) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > INT32_MAX) ||
        x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      throw bad(param, "'" + param + "' must hold token ids (integers >= 0)");
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

// prompt (OpenAI's four forms): "text", ["text", ...], [id, ...], [[id, ...], ...]; one choice each.
std::vector<PromptInput> parse_prompts(const json& body) {
  const json* p = field(body, "prompt");
  if (!p) throw bad("prompt", "'prompt' is required");
  const char* shape = "'prompt' must be a string, an array of strings, an array of token ids or an array of those";
  if (p->is_string()) return {PromptInput{p->get<std::string>(), {}, false}};
  if (!p->is_array() || p->empty()) throw bad("prompt", shape);
  if ((*p)[0].is_number()) return {PromptInput{"", token_ids(*p, "prompt"), true}};
  if (p->size() > static_cast<size_t>(kMaxPrompts))
    throw bad("prompt", "'prompt' holds at most " + std::to_string(kMaxPrompts) + " prompts");
  std::vector<PromptInput> out;
  for (size_t i = 0; i < p->size(); ++i) {
    const json& x = (*p)[i];
    if (x.is_string())
      out.push_back({x.get<std::string>(), {}, false});
    else if (x.is_array())
      out.push_back({"", token_ids(x, "prompt[" + std::to_string(i) + "]"), true});
    else
      throw bad("prompt", shape);
  }
  return out;
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

// OpenAI's presence/frequency penalties and logit_bias {"token id": bias} (engine/sampler.h).
void parse_openai_penalties(const json& body, CompletionRequest& r) {
  for (auto [name, dst] : {std::pair{"presence_penalty", &r.presence_penalty}, std::pair{"frequency_penalty", &r.frequency_penalty}}) {
    auto x = get_number(body, name);
    if (!x) continue;
    if (!(*x >= -kMaxOpenAiPenalty && *x <= kMaxOpenAiPenalty))
      throw bad(name, std::string("'") + name + "' must be in [-2, 2]");
    *dst = static_cast<float>(*x);
  }
  const json* lb = field(body, "logit_bias");
  if (!lb) return;
  if (!lb->is_object()) throw bad("logit_bias", "'logit_bias' must be an object of {\"token id\": bias}");
  for (const auto& [key, value] : lb->items()) {
    const std::string p = "logit_bias." + key;
    int64_t id = -1;
    if (!key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
      id = std::stoll(key);
    if (id < 0 || id > INT32_MAX) throw bad("logit_bias", "'logit_bias' keys must be token ids (decimal integers >= 0), got '" + key + "'");
    if (!value.is_number() || !(value.get<double>() >= -kMaxLogitBias && value.get<double>() <= kMaxLogitBias))
      throw bad(p, "'" + p + "' must be a number in [-100, 100]");
    r.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(value.get<double>())});
  }
  std::sort(r.logit_bias.begin(), r.logit_bias.end());
  for (size_t i = 1; i < r.logit_bias.size(); ++i)
    if (r.logit_bias[i].first == r.logit_bias[i - 1].first)
      throw bad("logit_bias", "'logit_bias' names token " + std::to_string(r.logit_bias[i].first) + " twice");
}

// stop_token_ids, priority, and echo (completions).
void parse_vllm_extras(const json& body, CompletionRequest& r) {
  if (const json* st = field(body, "stop_token_ids")) {
    r.stop_token_ids = token_ids(*st, "stop_token_ids");
    if (r.stop_token_ids.size() > static_cast<size_t>(kMaxStopTokenIds))
      throw bad("stop_token_ids", "'stop_token_ids' holds at most " + std::to_string(kMaxStopTokenIds) + " ids");
  }
  if (auto p = get_int(body, "priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()))
    r.priority = static_cast<int>(*p);
  if (r.endpoint != Endpoint::completions) return;
  r.echo = get_bool(body, "echo").value_or(false);
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

// The tool and reasoning fields (tool_request.h, reasoning_request.h), read from the body parsed
// again with key order kept: tool schemas and call arguments reach the template as written.
void parse_chat_tool_fields(std::string_view body_text, CompletionRequest& r) {
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(body_text);  // valid: parsed once already
  r.tools = parse_tool_request(body);
  r.reasoning = parse_reasoning_request(body);
  const auto& messages = body["messages"];
  for (size_t i = 0; i < r.messages.size(); ++i)
    parse_message_tool_fields(messages[i], r.messages[i].role, "messages[" + std::to_string(i) + "]", r.messages[i]);
}

// The output constraint (constraint_fields.h), which no end-of-generation rule may override:
// a constraining field's, or, with tool_choice "required" or a named function, the schema of the
// forced call (tool_schema.h; docs/serving.md, "Tool calls"). Both at once is an input error.
void parse_constraint(std::string_view body_text, CompletionRequest& r) {
  std::optional<FieldConstraint> c = parse_constraint_fields(body_text);
  if (r.tools.choice == ToolChoice::required || r.tools.choice == ToolChoice::named) {
    if (c) throw bad(c->field, "'" + c->field + "' cannot be combined with 'tool_choice' \"required\" or a named function "
                               "(the call's own schema constrains the output)");
    c = FieldConstraint{Constraint{ConstraintKind::json_schema, forced_tool_call_schema(r.tools)}, "tool_choice"};
  }
  if (!c) return;
  if (r.min_tokens > 0) throw bad("min_tokens", "'min_tokens' cannot be combined with '" + c->field + "' (the grammar says where the output ends)");
  if (r.ignore_eos) throw bad("ignore_eos", "'ignore_eos' cannot be combined with '" + c->field + "' (the grammar says where the output ends)");
  r.constraint = std::move(c->constraint);
  r.constraint_field = std::move(c->field);
}

json parse_object(std::string_view body_text) {
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return body;
}
}  // namespace

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body_text) {
  const json body = parse_object(body_text);
  CompletionRequest r;
  r.endpoint = endpoint;
  r.model = get_string(body, "model").value_or("");
  r.n = static_cast<int>(get_int(body, "n", 1, kMaxN).value_or(1));
  reject_unsupported(body, endpoint, r.n);
  if (endpoint == Endpoint::chat) {
    r.messages = parse_messages(body);
    r.chat_template_kwargs = parse_chat_template_kwargs(body);
    parse_chat_tool_fields(body_text, r);
  } else {
    if (field(body, "chat_template_kwargs"))
      throw bad("chat_template_kwargs", "'chat_template_kwargs' is only read by /v1/chat/completions");
    r.prompts = parse_prompts(body);
  }
  if (r.prompts.size() * r.n > static_cast<size_t>(kMaxChoices))
    throw bad("n", "prompts x n must be at most " + std::to_string(kMaxChoices) + ", got " +
                       std::to_string(r.prompts.size()) + " x " + std::to_string(r.n));
  parse_sampling(body, r);
  parse_vllm_sampling(body, r);
  parse_openai_penalties(body, r);
  parse_logprobs(body, r);
  parse_vllm_extras(body, r);
  parse_streaming(body, r);
  parse_constraint(body_text, r);
  for (const auto& item : body.items())
    if (!is_known_field(item.key())) r.unknown_fields.push_back(item.key());
  return r;
}

bool is_known_field(std::string_view name) {
  const auto& constraints = constraint_field_names();
  return std::find(std::begin(kKnownFields), std::end(kKnownFields), name) != std::end(kKnownFields) ||
         std::find(constraints.begin(), constraints.end(), name) != constraints.end();
}

TokenizeRequest parse_tokenize_request(std::string_view body_text) {
  const json body = parse_object(body_text);
  TokenizeRequest r;
  const bool llama = field(body, "content") != nullptr;
  if (llama) {
    r.text = get_string(body, "content").value();
    r.add_special = get_bool(body, "add_special").value_or(false);
    r.with_pieces = get_bool(body, "with_pieces").value_or(false);
    return r;
  }
  r.add_special = get_bool(body, "add_special_tokens").value_or(true);
  r.return_token_strs = get_bool(body, "return_token_strs").value_or(false);
  if (field(body, "messages")) {
    r.chat = true;
    r.messages = parse_messages(body);
    r.chat_template_kwargs = parse_chat_template_kwargs(body);
    if (!get_bool(body, "add_generation_prompt").value_or(true))
      throw bad("add_generation_prompt", "only 'add_generation_prompt': true is supported");
    return r;
  }
  auto text = get_string(body, "prompt");
  if (!text) throw bad("prompt", "'content' (llama-server), 'prompt' or 'messages' (vLLM) is required");
  r.text = *text;
  return r;
}

std::vector<int32_t> parse_detokenize_request(std::string_view body_text) {
  const json body = parse_object(body_text);
  const json* t = field(body, "tokens");
  if (!t) throw bad("tokens", "'tokens' is required");
  return token_ids(*t, "tokens");
}

}  // namespace mpkv::server

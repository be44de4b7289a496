#include "server/api_handler.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/auth.h"
#include "server/chat_request_setup.h"

namespace mpkv::server {

namespace {
using json = nlohmann::json;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

std::string token_id_message(const std::string& param, int32_t id, int n_vocab) {
  return "'" + param + "' holds token id " + std::to_string(id) + "; this model's vocabulary is [0, " +
         std::to_string(n_vocab) + ")";
}

// Token ids from the client (stop_token_ids, logit_bias, /detokenize) must name tokens.
void check_token_ids(const std::vector<int32_t>& ids, int n_vocab, const std::string& param) {
  for (int32_t id : ids)
    if (!token_id_valid(id, n_vocab)) throw ApiError(400, token_id_message(param, id, n_vocab), param);
}

// A prompt the engine would refuse (check_prompt, engine/request.h: the one rule), answered 400
// naming the field before anything is queued; and the OpenAI rule the engine does not have (it
// stops at the context instead): prompt + max_tokens must fit the context.
void check_prompt_for_client(const std::vector<int32_t>& tokens, const std::optional<int>& max_tokens, int n_ctx,
                             int n_vocab, const std::string& param) {
  const int n_prompt = static_cast<int>(tokens.size());
  const PromptCheck c = check_prompt(tokens, n_ctx, n_vocab);
  switch (c.problem) {
    case PromptCheck::Problem::none: break;
    case PromptCheck::Problem::empty: throw ApiError(400, "the prompt is empty", param);
    case PromptCheck::Problem::too_long:
      throw ApiError(400,
                     "this model's context is " + std::to_string(n_ctx) + " tokens; the prompt has " +
                         std::to_string(n_prompt) + " (it must leave room for at least one generated token)",
                     param, "context_length_exceeded");
    case PromptCheck::Problem::bad_token: throw ApiError(400, token_id_message(param, c.bad_token, n_vocab), param);
  }
  if (max_tokens && static_cast<int64_t>(n_prompt) + *max_tokens > n_ctx)
    throw ApiError(400,
                   "this model's context is " + std::to_string(n_ctx) + " tokens; you asked for " +
                       std::to_string(n_prompt + static_cast<int64_t>(*max_tokens)) + " (" + std::to_string(n_prompt) +
                       " in the prompt, " + std::to_string(*max_tokens) + " to generate)",
                   "max_tokens", "context_length_exceeded");
}

// The engine's parameters of one choice (the prompt is filled in by the caller).
RequestParams request_params(const CompletionRequest& r, uint64_t seed) {
  RequestParams p;
  p.max_tokens = r.max_tokens.value_or(-1);
  p.sampling.temperature = r.temperature;
  p.sampling.top_p = r.top_p;
  p.sampling.top_k = r.top_k;
  p.sampling.seed = seed;
  p.sampling.min_p = r.min_p;
  p.sampling.repeat_penalty = r.repetition_penalty;
  p.sampling.presence_penalty = r.presence_penalty;
  p.sampling.frequency_penalty = r.frequency_penalty;
  p.sampling.logit_bias = r.logit_bias;
  p.stop = r.stop;
  p.stop_token_ids = r.stop_token_ids;
  p.ignore_eos = r.ignore_eos;
  p.min_tokens = r.min_tokens;
  p.top_logprobs = r.top_logprobs;
  if (r.echo && r.top_logprobs >= 0) p.prompt_logprobs = r.top_logprobs;  // the echoed prompt's logprobs
  p.priority = r.priority;
  return p;
}

// The thinking budget of a chat request whose template thinks (reasoning_budget.h): the tags as
// this model's tokens. Off without thinking or with an unlimited budget.
ReasoningBudgetParams reasoning_budget_params(const Backend& b, const std::optional<ChatOutputOptions>& out, int budget) {
  ReasoningBudgetParams p;
  if (!out || !out->thinking || budget < 0) return p;
  p.budget = budget;
  p.start = b.encode_special(std::string(kThinkStart));
  p.end = b.encode_special(std::string(kThinkEnd));
  p.starts_inside = out->starts_in_thinking;
  return p;
}

// The request's constraint compiled on this (HTTP) thread, or null; a refused one is a 400 naming
// the field that carried it (503 while the compiler is busy).
std::shared_ptr<const CompiledConstraint> compiled_constraint(Backend& b, const CompletionRequest& r) {
  if (!r.constraint) return nullptr;
  try {
    return b.compile_constraint(*r.constraint);
  } catch (const ConstraintError& e) {
    if (e.busy()) throw ApiError(503, e.what(), r.constraint_field, "grammar_compiler_busy", "server_error");
    throw ApiError(400, "'" + r.constraint_field + "': " + e.what(), r.constraint_field);
  }
}

// The routes: POST for the ones that take a body, GET for the rest.
bool is_post_route(const std::string& p) {
  return p == "/v1/chat/completions" || p == "/v1/completions" || p == "/tokenize" || p == "/detokenize";
}
bool is_get_route(const std::string& p) { return p == "/health" || p == "/v1/models" || p == "/metrics"; }
}  // namespace

HttpResponse error_response(const ApiError& e, int retry_after_seconds) {
  HttpResponse r;
  r.status = e.status();
  r.body = error_body(e);
  if (e.status() == 503 || e.status() == 429) r.headers.emplace_back("Retry-After", std::to_string(retry_after_seconds));
  if (e.status() == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

ApiHandler::ApiHandler(HandlerOptions opts)
    : opts_(std::move(opts)), metrics_(opts_.model_name), rng_(std::random_device{}()), created_(unix_now()) {}

HttpResponse ApiHandler::handle(const HttpRequest& req) {
  try {
    return route(req);
  } catch (const ApiError& e) {
    return error_response(e, opts_.retry_after_seconds);
  } catch (const QueueFull& e) {
    return error_response(ApiError(503, std::string("the server is busy: ") + e.what(), "", "queue_full", "server_error"),
                          opts_.retry_after_seconds);
  } catch (const Error& e) {  // a request the engine refused (bad parameters, larger than the budget)
    return error_response(ApiError(400, e.what()), opts_.retry_after_seconds);
  } catch (const std::exception& e) {  // InternalError or anything else: a bug (docs/design.md §13)
    std::fprintf(stderr, "[server] %s %s: %s\n", req.method.c_str(), req.path.c_str(), report_for(e).line.c_str());
    return error_response(internal_server_error(), opts_.retry_after_seconds);
  }
}

HttpResponse ApiHandler::route(const HttpRequest& req) {
  const std::string& p = req.path;
  const bool known = is_get_route(p) || is_post_route(p);
  if (p == "/health" && req.method == "GET") {
    if (!backend_.load()) throw ApiError(503, "the model is loading", "", "", "server_error");
    if (draining_.load()) throw ApiError(503, "the server is shutting down", "", "", "server_error");
    return json_response(200, {{"status", "ok"}});
  }
  if (!bearer_authorized(req.authorization, opts_.api_key))
    throw ApiError(401, "a valid API key is required: Authorization: Bearer <key>", "", "invalid_api_key",
                   "authentication_error");
  if (!known) throw ApiError(404, "no route " + p, "", "", "not_found_error");
  const bool post = is_post_route(p);
  if (req.method != (post ? "POST" : "GET"))
    throw ApiError(405, "method " + req.method + " is not allowed on " + p + " (use " + (post ? "POST" : "GET") + ")");
  if (req.body.size() > opts_.max_body_bytes)
    throw ApiError(413, "the request body is larger than " + std::to_string(opts_.max_body_bytes) + " bytes");
  if (p == "/v1/models") {  // a model list only from a server that can serve it: routers poll this for readiness
    ready_backend();
    return models();
  }
  if (p == "/metrics") {
    Backend* b = backend_.load();
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.render(b ? b->metrics() : EngineMetrics{});
    return r;
  }
  if (p == "/tokenize") return tokenize(req.body);
  if (p == "/detokenize") return detokenize(req.body);
  return complete(p == "/v1/chat/completions" ? Endpoint::chat : Endpoint::completions, req);
}

Backend& ApiHandler::ready_backend() {
  Backend* b = backend_.load();
  if (!b) throw ApiError(503, "the model is loading", "", "", "server_error");
  if (draining_.load()) throw ApiError(503, "the server is shutting down", "", "", "server_error");
  return *b;
}

// llama-server answers {"tokens": [...]} (with_pieces: [{"id", "piece"}]); vLLM {"count",
// "max_model_len", "tokens"[, "token_strs"]}. Both sets of keys are always sent.
HttpResponse ApiHandler::tokenize(const std::string& body) {
  const TokenizeRequest r = parse_tokenize_request(body);
  Backend& b = ready_backend();
  const std::vector<int32_t> ids = r.chat ? b.encode_chat(r.messages, r.chat_template_kwargs) : b.encode_prompt(r.text, r.add_special);
  json tokens = json::array(), strs = json::array();
  for (int32_t id : ids) {
    tokens.push_back(r.with_pieces ? json{{"id", id}, {"piece", b.token_text(id)}} : json(id));
    if (r.return_token_strs) strs.push_back(b.token_text(id));
  }
  json out = {{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", b.n_ctx()}};
  if (r.return_token_strs) out["token_strs"] = strs;
  return json_response(200, out);
}

// llama-server reads "content", vLLM "prompt": both are sent.
HttpResponse ApiHandler::detokenize(const std::string& body) {
  const std::vector<int32_t> ids = parse_detokenize_request(body);
  Backend& b = ready_backend();
  check_token_ids(ids, b.n_vocab(), "tokens");
  const std::string text = b.decode(ids);
  return json_response(200, {{"content", text}, {"prompt", text}});
}

HttpResponse ApiHandler::models() const {
  json model = {{"id", opts_.model_name}, {"object", "model"}, {"created", created_}, {"owned_by", "mpkv"}};
  return json_response(200, {{"object", "list"}, {"data", json::array({model})}});
}

std::string ApiHandler::new_id(const char* prefix) {
  char buf[40];
  std::lock_guard lock(rng_mu_);
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, static_cast<unsigned long long>(rng_()));
  return buf;
}

uint64_t ApiHandler::random_seed() {
  std::lock_guard lock(rng_mu_);
  return rng_();
}

// Choices in OpenAI's order: prompt by prompt, n each (index = prompt * n + j). With a seed, the
// j-th choice of a prompt samples with seed + j, as vLLM's n > 1 does; without, each choice draws
// its own seed.
std::vector<ChoiceRequest> ApiHandler::choice_requests(Backend& b, const CompletionRequest& r) {
  check_token_ids(r.stop_token_ids, b.n_vocab(), "stop_token_ids");
  for (const auto& [id, bias] : r.logit_bias) check_token_ids({id}, b.n_vocab(), "logit_bias");
  std::vector<std::pair<std::vector<int32_t>, std::string>> prompts;  // tokens, echoed text
  std::optional<ChatOutputOptions> chat_output;
  ReasoningBudgetParams budget;
  std::vector<int32_t> grammar_after;  // the grammar starts after the thinking (grammar_gate.h)
  if (r.endpoint == Endpoint::chat) {
    Backend::ChatPrompt prompt = b.chat_prompt(chat_template_inputs(r, opts_.reasoning_budget));
    chat_output = chat_output_options(r, b.chat_template_source(), prompt.text);
    budget = reasoning_budget_params(b, chat_output, effective_reasoning_budget(r, opts_.reasoning_budget));
    if (grammar_after_thinking(r, b.chat_template_source(), prompt.text)) grammar_after = b.encode_special(std::string(kThinkEnd));
    prompts.emplace_back(std::move(prompt.tokens), "");
  }
  for (const PromptInput& in : r.prompts) prompts.emplace_back(in.is_tokens ? in.tokens : b.encode_prompt(in.text), "");
  // Every prompt is checked before any echo is decoded (an id outside the vocabulary has no text)
  // and before any choice starts.
  for (const auto& [tokens, echo] : prompts)
    check_prompt_for_client(tokens, r.max_tokens, b.n_ctx(), b.n_vocab(), r.endpoint == Endpoint::chat ? "messages" : "prompt");
  if (r.echo)
    for (size_t i = 0; i < r.prompts.size(); ++i) {
      const PromptInput& in = r.prompts[i];
      prompts[prompts.size() - r.prompts.size() + i].second = in.is_tokens ? b.decode(in.tokens) : in.text;
    }
  const std::shared_ptr<const CompiledConstraint> grammar = compiled_constraint(b, r);
  std::vector<ChoiceRequest> out;
  for (auto& [tokens, echo] : prompts)
    for (int j = 0; j < r.n; ++j) {
      ChoiceRequest& c = out.emplace_back();
      c.params = request_params(r, r.seed ? *r.seed + static_cast<uint64_t>(j) : random_seed());
      c.echo = echo;
      c.counts_prompt = j == 0;
      out.back().params.prompt = tokens;
      out.back().params.reasoning_budget = budget;
      if (chat_output) {
        out.back().chat_output = chat_output;
        out.back().chat_output->call_id_prefix = new_id("call_") + "_";
      }
      out.back().include_reasoning = r.reasoning.include_reasoning;
      out.back().params.grammar = grammar;  // shared; each choice gets its own matcher in the engine
      if (grammar) out.back().params.grammar_after = grammar_after;
    }
  return out;
}

HttpResponse ApiHandler::complete(Endpoint endpoint, const HttpRequest& req) {
  const CompletionRequest r = parse_completion_request(endpoint, req.body);
  for (const std::string& f : r.unknown_fields)
    if (metrics_.count_unknown_field(f))
      std::fprintf(stderr, "mpkv serve: ignoring unknown request field '%s' (logged once)\n", f.c_str());
  Backend& b = ready_backend();
  std::vector<ChoiceRequest> requests = choice_requests(b, r);

  const bool chat = endpoint == Endpoint::chat;
  ResponseFormatter fmt(endpoint, new_id(chat ? "chatcmpl-" : "cmpl-"), unix_now(), opts_.model_name,
                        r.top_logprobs >= 0, r.include_usage, static_cast<int>(requests.size()));
  HttpResponse resp;
  if (r.stream && req.reserve_stream) resp.stream_lease = req.reserve_stream();  // 429 before anything starts
  auto c = std::make_shared<Completion>(b, metrics_, inflight_, std::move(fmt), r.include_usage);
  c->start(std::move(requests));
  if (!r.stream) {  // a client that leaves meanwhile aborts it (a stream's transport cancels it)
    const AbortOnClose abort_on_close(req.client, [c] { c->cancel(); });
    return c->wait_response();
  }
  resp.content_type = "text/event-stream";
  resp.headers.emplace_back("Cache-Control", "no-cache");
  resp.stream = std::move(c);
  return resp;
}

}  // namespace mpkv::server

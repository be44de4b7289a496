// The HTTP API without the transport (docs/serving.md): method, path, Authorization and body in;
// status, headers and a body or a stream out. Routes:
//   GET  /health               200 when ready; 503 while loading or shutting down (no auth)
//   GET  /v1/models            the one served model
//   GET  /metrics              Prometheus text (metrics.h)
//   POST /v1/chat/completions  chat (openai_request.h), JSON or SSE
//   POST /v1/completions       raw-prompt completion (one or more prompts, text or token ids), JSON or SSE
//   POST /tokenize             text (or chat messages) -> token ids (llama-server's and vLLM's shapes)
//   POST /detokenize           token ids -> text
// With an API key every route but /health needs "Authorization: Bearer KEY" (401). Bodies over
// max_body_bytes get 413, unknown paths 404, wrong methods 405, requests while loading or
// draining 503, a full queue 503 with Retry-After. Every error body is OpenAI's error object.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/completion.h"
#include "server/http_types.h"
#include "server/inflight.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace mpkv::server {

struct HandlerOptions {
  std::string model_name = "mpkv";   // /v1/models, the "model" of responses, the metrics' label
  std::string api_key;               // "": no authentication
  size_t max_body_bytes = 1 << 20;
  int retry_after_seconds = 1;       // Retry-After of 503 answers
  int reasoning_budget = -1;         // --reasoning-budget: thinking tokens per chat request (-1: unlimited)
};

class ApiHandler {
 public:
  explicit ApiHandler(HandlerOptions opts);

  // The backend once the model is loaded (nullptr: still loading). Must outlive the handler's use.
  void set_backend(Backend* backend) { backend_.store(backend); }
  // Shutdown: new completions and /health get 503 from now on.
  void begin_drain() { draining_.store(true); }
  InFlight& in_flight() { return inflight_; }
  ServerMetrics& metrics() { return metrics_; }
  const HandlerOptions& options() const { return opts_; }

  // Never throws: every failure becomes an error response (5xx other than 503 means a bug).
  HttpResponse handle(const HttpRequest& req);

 private:
  HttpResponse route(const HttpRequest& req);
  HttpResponse complete(Endpoint endpoint, const HttpRequest& req);
  HttpResponse tokenize(const std::string& body);
  HttpResponse detokenize(const std::string& body);
  Backend& ready_backend();  // throws 503 while loading or draining
  // One engine request per prompt (chat: one), checked against the context and the vocabulary.
  std::vector<ChoiceRequest> choice_requests(Backend& b, const CompletionRequest& r);
  HttpResponse models() const;
  std::string new_id(const char* prefix);
  uint64_t random_seed();

  HandlerOptions opts_;
  std::atomic<Backend*> backend_{nullptr};
  std::atomic<bool> draining_{false};
  ServerMetrics metrics_;
  InFlight inflight_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  int64_t created_;  // Unix seconds when the handler was made (/v1/models)
};

// An error response for an ApiError (adds Retry-After to 503s and WWW-Authenticate to 401s).
HttpResponse error_response(const ApiError& e, int retry_after_seconds);

}  // namespace mpkv::server

// The transport-free request and response the API handler works on (api_handler.h), so it can be
// unit tested and fuzzed without sockets; http_server.cpp maps them to Boost.Beast.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/client_link.h"

namespace mpkv::server {

// One of a client's concurrent streams, held for as long as the stream is written (the
// transport's per-address cap, --max-streams-per-client); released when the last copy goes.
using StreamLease = std::shared_ptr<void>;

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // without the query string
  std::string authorization;  // the Authorization header ("" when absent)
  std::string body;
  std::shared_ptr<ClientLink> client;  // null without a transport (unit tests, the fuzzer)
  // Takes one of the client's concurrent streams; the handler calls it before a stream's requests
  // are submitted to the engine, so a refused stream never starts. Throws ApiError(429) past the
  // cap. Unset without a transport (no cap).
  std::function<StreamLease()> reserve_stream;
};

// The body of a streamed response, produced piece by piece on the HTTP thread.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Waits up to `wait` and sets `out` to the next piece ("" when nothing came). Returns false
  // when `out` is the last piece.
  virtual bool next(std::string& out, std::chrono::milliseconds wait) = 0;
  // The client went away: abort the request behind the stream (idempotent).
  virtual void cancel() = 0;
  // `wake` is called (on any thread, without blocking) whenever a piece may be ready, so the
  // transport can poll next() with no wait instead of holding a thread; null stops the calls.
  virtual void set_wakeup(std::function<void()> wake) {}
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<ResponseStream> stream;  // set: the body is streamed (server-sent events)
  StreamLease stream_lease;                // with a stream: the transport holds it until the stream ends
};

}  // namespace mpkv::server

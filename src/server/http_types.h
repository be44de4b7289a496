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

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // without the query string
  std::string authorization;  // the Authorization header ("" when absent)
  std::string body;
  std::shared_ptr<ClientLink> client;  // null without a transport (unit tests, the fuzzer)
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
};

}  // namespace mpkv::server

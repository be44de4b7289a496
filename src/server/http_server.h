// The HTTP/1.1 transport around an ApiHandler (docs/serving.md, "HTTP server" and "Limits and
// vanished clients"), on Boost.Beast: one I/O thread reads every connection asynchronously (an
// idle or slow socket holds no thread), with a deadline for the request's headers and one for its
// body; completions run on a pool of worker threads; server-sent events are written as the
// engine produces them (the stream wakes the I/O thread). A client whose socket closes while its
// answer is computed or streamed has its request aborted at once (ClientLink, ResponseStream);
// one that only half-closed it, and still reads, gets its answer (a probe tells them apart).
// Past max_connections a new connection gets 503 + Retry-After; past max_streams_per_client
// concurrent streams from one address, a new stream gets 429 + Retry-After before its requests
// are queued (HttpRequest::reserve_stream). HTTP/1.0 streams are not chunked.
#pragma once
#include <memory>
#include <string>

#include "server/api_handler.h"

namespace mpkv::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: ephemeral
  int threads = 64;                 // completions handled at once (a non-streaming one holds a thread while it runs)
  int header_timeout_seconds = 10;  // from the wait for a request (keep-alive idle included) to its last header
  int body_timeout_seconds = 30;    // from the last header to the last byte of the body
  int write_timeout_seconds = 30;   // one write of an answer to a client that does not read
  int max_connections = 1024;       // open at once; more get 503 + Retry-After
  int max_streams_per_client = 64;  // concurrent SSE streams from one client address; more get 429
};

class HttpServer {
 public:
  HttpServer(ApiHandler& handler, HttpServerOptions opts);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts accepting on a thread; returns the bound port. Throws Error when it cannot
  // bind. Raises the soft RLIMIT_NOFILE so max_connections fit (lowers max_connections, with a
  // line on stderr, when the hard limit is below).
  int start();
  // Stops accepting and closes every connection (their requests are aborted; drain before);
  // joins the threads.
  void stop();
  // Connections open now (refused ones not counted).
  size_t open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpkv::server

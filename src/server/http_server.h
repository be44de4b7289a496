// cpp-httplib around an ApiHandler (docs/serving.md, "HTTP server"): binds (127.0.0.1 by default;
// port 0 = an ephemeral port), maps every request to ApiHandler::handle, streams server-sent
// events through a chunked content provider, and cancels a stream whose client went away (the
// provider's write fails, its releaser reports failure, the request is aborted).
#pragma once
#include <memory>
#include <string>
#include <thread>

#include "server/api_handler.h"

namespace httplib {
class Server;
}

namespace mpkv::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: ephemeral
  int threads = 64;           // connections served at once (each stream holds one)
  int read_timeout_seconds = 30;
  int write_timeout_seconds = 30;
};

class HttpServer {
 public:
  HttpServer(ApiHandler& handler, HttpServerOptions opts);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts accepting on a thread; returns the bound port. Throws Error when it cannot bind.
  int start();
  // Stops accepting and closes the listening socket; open streams are cut (drain before).
  void stop();

 private:
  ApiHandler& handler_;
  HttpServerOptions opts_;
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
};

}  // namespace mpkv::server

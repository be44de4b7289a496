#include "server/http_server.h"

#include <httplib.h>

#include <cstdio>

#include "server/openai_response.h"

namespace mpkv::server {

namespace {
HttpRequest to_request(const httplib::Request& req) {
  return {req.method, req.path, req.get_header_value("Authorization"), req.body};
}

// Streams `stream` as chunked server-sent events. When the client is gone, writing fails and
// httplib calls the releaser with success = false: the request is cancelled (aborted).
void set_stream(httplib::Response& res, std::shared_ptr<ResponseStream> stream, const std::string& content_type) {
  res.set_chunked_content_provider(
      content_type,
      [stream](size_t, httplib::DataSink& sink) {
        std::string piece;
        bool more = false;
        try {
          more = stream->next(piece, std::chrono::milliseconds(500));
        } catch (const std::exception& e) {  // a bug mid-stream: a generic error event, the real one logged
          std::fprintf(stderr, "[server] a stream: %s\n", report_for(e).line.c_str());
          stream->cancel();
          piece = ResponseFormatter::error_event(internal_server_error());
        }
        if (!piece.empty() && !sink.write(piece.data(), piece.size())) return false;
        if (!more) sink.done();
        return true;
      },
      [stream](bool success) {
        if (!success) stream->cancel();
      });
}

void apply(const HttpResponse& r, httplib::Response& res) {
  res.status = r.status;
  for (const auto& [k, v] : r.headers) res.set_header(k.c_str(), v);
  if (r.stream)
    set_stream(res, r.stream, r.content_type);
  else
    res.set_content(r.body, r.content_type.c_str());
}
}  // namespace

HttpServer::HttpServer(ApiHandler& handler, HttpServerOptions opts)
    : handler_(handler), opts_(std::move(opts)), svr_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::start() {
  httplib::Server& s = *svr_;
  const int threads = opts_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(handler_.options().max_body_bytes);
  s.set_read_timeout(opts_.read_timeout_seconds, 0);
  s.set_write_timeout(opts_.write_timeout_seconds, 0);
  s.set_keep_alive_timeout(2);  // an idle keep-alive connection holds a thread (and delays shutdown) this long
  auto serve = [this](const httplib::Request& req, httplib::Response& res) { apply(handler_.handle(to_request(req)), res); };
  for (const char* path : {"/health", "/v1/models", "/metrics", "/v1/chat/completions", "/v1/completions"}) {
    s.Get(path, serve);
    s.Post(path, serve);
  }
  // Anything httplib answers itself (404 for other paths, 413 for a body over the limit, 400 for
  // a malformed request line) still gets OpenAI's error object; 404 and 405 go through the handler.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return;
    if (res.status == 404) return apply(handler_.handle(to_request(req)), res);
    const char* msg = res.status == 413 ? "the request body is too large" : "the request could not be read";
    apply(error_response(ApiError(res.status, msg), handler_.options().retry_after_seconds), res);
  });
  const int port = opts_.port == 0 ? s.bind_to_any_port(opts_.host) : (s.bind_to_port(opts_.host, opts_.port) ? opts_.port : -1);
  MPKV_CHECK(port > 0, "cannot listen on " + opts_.host + ":" + std::to_string(opts_.port) + " (in use, or no such address)");
  thread_ = std::thread([this] { svr_->listen_after_bind(); });
  // httplib's stop() does nothing until the listening loop runs, so a stop() right after start()
  // (a model that fails to load) would leave the thread listening for ever: wait for the loop.
  for (int i = 0; i < 2000 && !svr_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return port;
}

void HttpServer::stop() {
  if (svr_) svr_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace mpkv::server

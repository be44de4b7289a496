#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "server/openai_response.h"

namespace mpkv::server {

namespace {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr uint32_t kHeaderLimit = 16 * 1024;  // request line + headers; more get 431

// Posts work to the I/O thread from any thread (worker threads, the engine's stepping thread via a
// stream's wakeup) until the server stops; afterwards the work is dropped (it only holds
// references that abort their requests when released).
class Poster {
 public:
  explicit Poster(net::io_context& ioc) : ioc_(&ioc) {}
  template <class F>
  void post(F&& f) {
    std::lock_guard lock(mu_);
    if (ioc_) net::post(*ioc_, std::forward<F>(f));
  }
  void close() {
    std::lock_guard lock(mu_);
    ioc_ = nullptr;
  }

 private:
  std::mutex mu_;
  net::io_context* ioc_;
};

// HTTP/1.1 bytes of a whole response.
std::string serialize(const HttpResponse& r, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.body() = r.body;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

// One chunk of a chunked body (and the terminating chunk when `last`).
std::string chunk(const std::string& piece, bool last) {
  std::string frame;
  if (!piece.empty()) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    frame = size + piece + "\r\n";
  }
  if (last) frame += "0\r\n\r\n";
  return frame;
}

bool client_gone(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
         ec == net::error::connection_reset || ec == net::error::operation_aborted || ec == net::error::broken_pipe ||
         ec == http::error::partial_message;
}

// Raises the soft limit on open files to `wanted` if the hard limit allows; returns the soft limit.
rlim_t raise_open_files(rlim_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return wanted;
  if (lim.rlim_cur < wanted) {
    lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, lim.rlim_max);
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  return lim.rlim_cur;
}

// Closes a connection whose request was not (wholly) read without resetting it, so the client
// reads the answer already sent: stops sending, then reads and drops what it still sends until it
// closes or `limit` passes.
class Lingerer : public std::enable_shared_from_this<Lingerer> {
 public:
  explicit Lingerer(tcp::socket s) : socket_(std::move(s)), timer_(socket_.get_executor()) {}
  static void start(tcp::socket s, std::chrono::milliseconds limit) {
    auto l = std::make_shared<Lingerer>(std::move(s));
    beast::error_code ec;
    l->socket_.shutdown(tcp::socket::shutdown_send, ec);
    l->timer_.expires_after(limit);
    l->timer_.async_wait([l](beast::error_code e) {
      beast::error_code ignored;
      if (!e) l->socket_.close(ignored);
    });
    l->read();
  }

 private:
  void read() {
    socket_.async_read_some(net::buffer(sink_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) return self->read();
      self->timer_.cancel();
      beast::error_code ignored;
      self->socket_.close(ignored);
    });
  }
  tcp::socket socket_;
  net::steady_timer timer_;
  std::array<char, 4096> sink_;
};

constexpr std::chrono::milliseconds kLinger{1000};
}  // namespace

namespace http_detail {
class Connection;

struct ServerCore {
  ServerCore(ApiHandler& h, HttpServerOptions o) : handler(h), opts(std::move(o)) {}

  void accept();
  void refuse(tcp::socket socket);

  ApiHandler& handler;
  HttpServerOptions opts;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  std::shared_ptr<Poster> poster = std::make_shared<Poster>(ioc);
  std::optional<net::thread_pool> workers;
  std::thread io_thread;
  // I/O thread only:
  std::set<std::shared_ptr<Connection>> connections;
  std::map<std::string, int> streams_by_address;
  std::atomic<size_t> open{0};
};

// One client connection, driven on the I/O thread: read a request (header, then body, each under
// its deadline) -> hand it to the handler (a worker thread for POST) while watching the socket
// for the client leaving -> write the answer (whole, or chunked server-sent events as the stream
// wakes us) -> the next request (keep-alive) or close.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerCore& srv, tcp::socket socket)
      : srv_(srv), stream_(std::move(socket)), tick_(srv.ioc) {
    beast::error_code ec;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    address_ = ec ? "?" : peer.address().to_string();
  }
  void start() { read_header(); }
  void close();

 private:
  void read_header();
  void on_header(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void on_read_error(beast::error_code ec);
  HttpRequest take_request();
  void dispatch(HttpRequest req);
  void watch();
  void on_readable(beast::error_code ec, uint64_t generation);
  void respond(HttpResponse r);
  void write_whole(const HttpResponse& r, bool keep_alive);
  void begin_stream(HttpResponse r);
  void pump();
  void tick();
  void end_stream();
  void next_request();
  template <class Then>
  void write(std::string bytes, Then then);

  ServerCore& srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string address_, out_;
  std::shared_ptr<ClientLink> link_;       // of the request being answered
  std::shared_ptr<ResponseStream> sse_;    // the stream being written
  net::steady_timer tick_;                 // polls the stream now and then (keep-alive comments)
  uint64_t generation_ = 0;                // requests read; a socket watch of an earlier one is stale
  bool keep_alive_ = false, busy_ = false, writing_ = false, closed_ = false, counted_stream_ = false;
};

template <class Then>
void Connection::write(std::string bytes, Then then) {
  out_ = std::move(bytes);
  writing_ = true;
  stream_.expires_after(std::chrono::seconds(srv_.opts.write_timeout_seconds));
  net::async_write(stream_, net::buffer(out_), [self = shared_from_this(), then](beast::error_code ec, size_t) {
    self->writing_ = false;
    if (self->closed_) return;
    if (ec) return self->close();  // a client that left or does not read
    self->stream_.expires_never();
    then();
  });
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  if (link_) link_->close();  // aborts a non-streaming request being computed
  if (sse_) {
    sse_->set_wakeup(nullptr);
    sse_->cancel();
    sse_.reset();
  }
  if (counted_stream_ && --srv_.streams_by_address[address_] == 0) srv_.streams_by_address.erase(address_);
  counted_stream_ = false;
  tick_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  --srv_.open;
  srv_.connections.erase(shared_from_this());
}

void Connection::read_header() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(srv_.handler.options().max_body_bytes);
  stream_.expires_after(std::chrono::seconds(srv_.opts.header_timeout_seconds));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(beast::error_code ec) {
  if (closed_) return;
  if (ec) return on_read_error(ec);
  if (beast::iequals(parser_->get()[http::field::expect], "100-continue"))
    return write("HTTP/1.1 100 Continue\r\n\r\n", [this] { read_body(); });
  read_body();
}

void Connection::read_body() {
  if (parser_->is_done()) return on_body({});
  stream_.expires_after(std::chrono::seconds(srv_.opts.body_timeout_seconds));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

// A request that could not be read: silence for a client that left or ran out of time, else
// OpenAI's error object for what was wrong, and the connection closes (its bytes are unread).
void Connection::on_read_error(beast::error_code ec) {
  if (client_gone(ec)) return close();
  int status = 400;
  const char* msg = "the request could not be read";
  if (ec == http::error::body_limit) status = 413, msg = "the request body is too large";
  if (ec == http::error::header_limit) status = 431, msg = "the request headers are too large";
  const HttpResponse r = error_response(ApiError(status, msg), srv_.handler.options().retry_after_seconds);
  busy_ = true;
  write(serialize(r, false), [this] {
    Lingerer::start(stream_.release_socket(), kLinger);
    close();
  });
}

HttpRequest Connection::take_request() {
  http::request<http::string_body> req = parser_->release();
  std::string path(req.target());
  path = path.substr(0, path.find('?'));
  keep_alive_ = req.keep_alive();
  link_ = std::make_shared<ClientLink>();
  return {std::string(req.method_string()), std::move(path), std::string(req[http::field::authorization]),
          std::move(req.body()), link_};
}

void Connection::on_body(beast::error_code ec) {
  if (closed_) return;
  if (ec) return on_read_error(ec);
  stream_.expires_never();
  busy_ = true;
  ++generation_;
  dispatch(take_request());
  if (busy_ && !closed_) watch();
}

// Completions (POST) may block on the engine, so they run on a worker; the rest is quick.
void Connection::dispatch(HttpRequest req) {
  if (req.method != "POST") return respond(srv_.handler.handle(req));
  net::post(*srv_.workers, [self = shared_from_this(), req = std::move(req)] {
    HttpResponse r = self->srv_.handler.handle(req);
    self->srv_.poster->post([self, r = std::move(r)]() mutable { self->respond(std::move(r)); });
  });
}

// Waits for the socket to become readable while the answer is computed: end of file or an error
// means the client left (close() aborts its request); pipelined bytes end the watch.
void Connection::watch() {
  stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), g = generation_](beast::error_code ec) {
    self->on_readable(ec, g);
  });
}

void Connection::on_readable(beast::error_code ec, uint64_t generation) {
  if (closed_ || !busy_ || generation != generation_ || ec == net::error::operation_aborted) return;
  if (!ec) {
    char byte;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;  // the next request, pipelined: read after this answer
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return watch();
  }
  close();
}

void Connection::respond(HttpResponse r) {
  if (closed_) return;  // r.stream, if any, is released here: its request is aborted
  if (r.stream) return begin_stream(std::move(r));
  write_whole(r, keep_alive_);
}

void Connection::write_whole(const HttpResponse& r, bool keep_alive) {
  keep_alive_ = keep_alive;
  write(serialize(r, keep_alive), [this] { next_request(); });
}

void Connection::begin_stream(HttpResponse r) {
  int& streams = srv_.streams_by_address[address_];
  if (streams >= srv_.opts.max_streams_per_client) {
    r.stream->cancel();
    if (streams == 0) srv_.streams_by_address.erase(address_);
    HttpResponse refused = error_response(
        ApiError(429, "too many concurrent streams from this address (at most " +
                          std::to_string(srv_.opts.max_streams_per_client) + ")",
                 "", "rate_limit_exceeded", "requests"),
        srv_.handler.options().retry_after_seconds);
    refused.headers.emplace_back("Retry-After", std::to_string(srv_.handler.options().retry_after_seconds));
    return write_whole(refused, keep_alive_);
  }
  ++streams;
  counted_stream_ = true;
  sse_ = std::move(r.stream);
  http::response<http::empty_body> head{static_cast<http::status>(r.status), 11};
  head.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) head.set(k, v);
  head.chunked(true);
  head.keep_alive(keep_alive_);
  std::ostringstream bytes;
  bytes << head.base();
  std::weak_ptr<Connection> weak = shared_from_this();
  sse_->set_wakeup([weak, poster = srv_.poster] {
    poster->post([weak] {
      if (auto c = weak.lock()) c->pump();
    });
  });
  write(bytes.str(), [this] {
    pump();
    tick();
  });
}

// Writes what the stream has ready (one write at a time); the stream's wakeup or the tick calls
// again. A bug in the stream ends it with the generic error event and aborts its request.
void Connection::pump() {
  if (closed_ || writing_ || !sse_) return;
  std::string piece;
  bool more = false;
  try {
    more = sse_->next(piece, std::chrono::milliseconds(0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[server] a stream: %s\n", report_for(e).line.c_str());
    sse_->cancel();
    piece = ResponseFormatter::error_event(internal_server_error());
  }
  if (piece.empty() && more) return;
  write(chunk(piece, !more), [this, more] { more ? pump() : end_stream(); });
}

void Connection::tick() {
  tick_.expires_after(std::chrono::seconds(1));
  tick_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->closed_ || !self->sse_) return;
    self->pump();
    self->tick();
  });
}

void Connection::end_stream() {
  sse_->set_wakeup(nullptr);
  sse_.reset();
  tick_.cancel();
  if (--srv_.streams_by_address[address_] == 0) srv_.streams_by_address.erase(address_);
  counted_stream_ = false;
  next_request();
}

void Connection::next_request() {
  busy_ = false;
  link_.reset();
  beast::error_code ec;
  stream_.socket().cancel(ec);  // the watch
  if (!keep_alive_) {
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    return close();
  }
  read_header();
}

void ServerCore::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {  // out of file descriptors, or the like: try again shortly rather than spin
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    if (connections.size() >= static_cast<size_t>(opts.max_connections)) {
      refuse(std::move(socket));
    } else {
      auto c = std::make_shared<Connection>(*this, std::move(socket));
      connections.insert(c);
      ++open;
      c->start();
    }
    accept();
  });
}

// Over max_connections: 503 + Retry-After written without reading the request (an empty send
// buffer takes it at once), then a lingering close.
void ServerCore::refuse(tcp::socket socket) {
  const std::string bytes = serialize(
      error_response(ApiError(503, "too many connections; try again later", "", "", "server_error"),
                     handler.options().retry_after_seconds),
      false);
  beast::error_code ec;
  socket.non_blocking(true, ec);
  socket.write_some(net::buffer(bytes), ec);
  Lingerer::start(std::move(socket), kLinger);
}
}  // namespace http_detail

struct HttpServer::Impl : http_detail::ServerCore {
  using ServerCore::ServerCore;
};

HttpServer::HttpServer(ApiHandler& handler, HttpServerOptions opts)
    : impl_(std::make_unique<Impl>(handler, std::move(opts))) {}

HttpServer::~HttpServer() { stop(); }

size_t HttpServer::open_connections() const { return impl_->open.load(); }

int HttpServer::start() {
  Impl& s = *impl_;
  const rlim_t wanted = static_cast<rlim_t>(s.opts.max_connections) + 256;  // + the model, logs, the engine
  const rlim_t have = raise_open_files(wanted);
  if (have < wanted) {
    s.opts.max_connections = static_cast<int>(std::max<rlim_t>(have, 512) - 256);
    std::fprintf(stderr, "[server] the open-file limit is %llu: at most %d connections\n",
                 static_cast<unsigned long long>(have), s.opts.max_connections);
  }
  beast::error_code ec;
  tcp::resolver resolver(s.ioc);
  const auto endpoints = resolver.resolve(s.opts.host, std::to_string(s.opts.port), ec);
  const auto listen = [&](const tcp::endpoint& ep) {
    s.acceptor.open(ep.protocol(), ec);
    if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) s.acceptor.bind(ep, ec);
    if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec && s.acceptor.is_open()) s.acceptor.close();
  };
  if (!ec && !endpoints.empty()) listen(*endpoints.begin());
  MPKV_CHECK(!ec && !endpoints.empty() && s.acceptor.is_open(),
             "cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port) + " (in use, or no such address)");
  const int port = s.acceptor.local_endpoint().port();
  s.workers.emplace(static_cast<size_t>(s.opts.threads));
  s.accept();
  s.io_thread = std::thread([&s] {
    const auto work = net::make_work_guard(s.ioc);  // run() returns only at stop()
    for (;;) {
      try {
        s.ioc.run();
        return;
      } catch (const std::exception& e) {  // a bug in a handler: log it, keep serving the others
        std::fprintf(stderr, "[server] the I/O thread: %s\n", report_for(e).line.c_str());
      }
    }
  });
  return port;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.io_thread.joinable()) return;
  std::promise<void> closed;
  net::post(s.ioc, [&s, &closed] {
    beast::error_code ec;
    s.acceptor.close(ec);
    s.accept_retry.cancel();
    for (const auto& c : std::vector<std::shared_ptr<http_detail::Connection>>(s.connections.begin(), s.connections.end())) c->close();
    closed.set_value();
  });
  closed.get_future().wait();
  s.poster->close();
  s.ioc.stop();
  s.io_thread.join();
  s.workers->join();  // closed connections aborted their requests: the workers return
}

}  // namespace mpkv::server

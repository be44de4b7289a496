#include "server/http_server.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
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
constexpr std::chrono::milliseconds kProbePoll{100};  // how often a half-closed client's socket is checked

// Concurrent streams per client address (--max-streams-per-client). Leases may outlive the
// connection that took them (a response in flight between a worker and the I/O thread), so
// they share this object. Thread-safe: workers reserve, the I/O thread releases.
class StreamCounts : public std::enable_shared_from_this<StreamCounts> {
 public:
  explicit StreamCounts(int cap) : cap_(cap) {}
  StreamLease reserve(const std::string& address) {
    {
      std::lock_guard lock(mu_);
      int& n = by_address_[address];
      if (n >= cap_) {
        if (n == 0) by_address_.erase(address);
        throw ApiError(429, "too many concurrent streams from this address (at most " + std::to_string(cap_) + ")", "",
                       "rate_limit_exceeded", "requests");
      }
      ++n;
    }
    return std::make_shared<Slot>(shared_from_this(), address);
  }

 private:
  struct Slot {
    Slot(std::shared_ptr<StreamCounts> c, std::string a) : counts(std::move(c)), address(std::move(a)) {}
    ~Slot() { counts->release(address); }
    std::shared_ptr<StreamCounts> counts;
    std::string address;
  };
  void release(const std::string& address) {
    std::lock_guard lock(mu_);
    if (--by_address_[address] <= 0) by_address_.erase(address);
  }
  std::mutex mu_;
  std::map<std::string, int> by_address_;
  int cap_;
};

// The kernel's TCP state of a socket: TCP_CLOSE_WAIT after the client's FIN (it may still read),
// TCP_CLOSE once it answered our bytes with a reset (it closed the socket).
int tcp_state(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 ? info.tcpi_state : TCP_CLOSE;
}

// Bytes written but not yet acknowledged by the client.
int unsent_bytes(int fd) {
  int n = 0;
  return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : 1;
}
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
  std::shared_ptr<StreamCounts> streams = std::make_shared<StreamCounts>(opts.max_streams_per_client);
  // I/O thread only:
  std::set<std::shared_ptr<Connection>> connections;
  std::atomic<size_t> open{0};
};

// One client connection, driven on the I/O thread: read a request (header, then body, each under
// its deadline) -> hand it to the handler (a worker thread for POST) while watching the socket
// for the client leaving -> write the answer (whole, or chunked server-sent events as the stream
// wakes us) -> the next request (keep-alive) or close.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerCore& srv, tcp::socket socket)
      : srv_(srv), stream_(std::move(socket)), tick_(srv.ioc), probe_timer_(srv.ioc) {
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
  void keep_pipelined();
  bool probe_half_closed();
  void poll_probe();
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
  StreamLease lease_;                      // its place under the address's stream cap
  net::steady_timer tick_;                 // polls the stream now and then (keep-alive comments)
  net::steady_timer probe_timer_;          // polls a half-closed client's socket (probe_half_closed)
  uint64_t generation_ = 0;                // requests read; a socket watch of an earlier one is stale
  unsigned version_ = 11;                  // of the request being answered: 10 = HTTP/1.0
  bool keep_alive_ = false, busy_ = false, writing_ = false, closed_ = false;
  bool chunked_ = true;                    // the stream is framed in chunks (HTTP/1.1; HTTP/1.0 ends it by closing)
  bool probing_ = false;                   // the client half-closed during this request (probe sent)
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
  lease_.reset();
  tick_.cancel();
  probe_timer_.cancel();
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
  version_ = req.version();
  probing_ = false;
  link_ = std::make_shared<ClientLink>();
  return {std::string(req.method_string()), std::move(path), std::string(req[http::field::authorization]),
          std::move(req.body()), link_, [counts = srv_.streams, address = address_] { return counts->reserve(address); }};
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

// Waits for the socket to become readable while the answer is computed or streamed: an error
// means the client left (close() aborts its request); end of file is probed (probe_half_closed);
// pipelined bytes are kept for later (keep_pipelined).
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
    if (n > 0) return keep_pipelined();
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return watch();
    if (n == 0 && probe_half_closed()) return;
  }
  close();
}

// Bytes of a pipelined next request while this one is answered: they go to the read buffer (the
// next request is parsed from it) and the watch goes on, up to one request's worth; past that
// this request runs unwatched (its client reads nothing meanwhile anyway).
void Connection::keep_pipelined() {
  const size_t cap = kHeaderLimit + srv_.handler.options().max_body_bytes;
  const int fd = stream_.socket().native_handle();
  while (buffer_.size() < cap) {
    const auto space = buffer_.prepare(std::min<size_t>(cap - buffer_.size(), 64 * 1024));
    const ssize_t n = ::recv(fd, space.data(), space.size(), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.commit(static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return watch();  // end of file: seen next
    return close();
  }
}

// End of file during a request: the client closed its socket, or only shut down its sending side
// and still reads (docs/serving.md, "Limits and vanished clients"). Only a write tells them apart
// (a closed socket answers it with a reset), so a probe goes out: an interim "100 Continue" before
// the answer's head (HTTP/1.1 clients skip 1xx answers), an SSE comment inside a stream; bytes
// already unacknowledged serve as well. The socket's state is then polled until the answer ends.
// HTTP/1.0 clients may not get 1xx answers: for them end of file before the answer means gone.
bool Connection::probe_half_closed() {
  if (!sse_ && version_ < 11) return false;
  if (probing_) return true;
  probing_ = true;
  const int fd = stream_.socket().native_handle();
  if (!writing_ && unsent_bytes(fd) == 0) {
    const std::string probe = !sse_ ? "HTTP/1.1 100 Continue\r\n\r\n" : chunked_ ? chunk(":\n\n", false) : ":\n\n";
    if (::send(fd, probe.data(), probe.size(), MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(probe.size()))
      return false;  // an empty send buffer takes a few bytes: the client reset the connection
  }
  poll_probe();
  return true;
}

void Connection::poll_probe() {
  probe_timer_.expires_after(kProbePoll);
  probe_timer_.async_wait([self = shared_from_this(), g = generation_](beast::error_code ec) {
    if (ec || self->closed_ || !self->busy_ || g != self->generation_) return;
    if (tcp_state(self->stream_.socket().native_handle()) == TCP_CLOSE) return self->close();
    self->poll_probe();
  });
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

// The head of a stream, then its pieces as they come. HTTP/1.1: chunked, the connection kept;
// HTTP/1.0 has no chunks: "Connection: close", the pieces as they are, the end is the close.
void Connection::begin_stream(HttpResponse r) {
  sse_ = std::move(r.stream);
  lease_ = std::move(r.stream_lease);
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;
  http::response<http::empty_body> head{static_cast<http::status>(r.status), 11};
  head.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) head.set(k, v);
  head.chunked(chunked_);
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
  write(chunked_ ? chunk(piece, !more) : piece, [this, more] { more ? pump() : end_stream(); });
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
  lease_.reset();
  tick_.cancel();
  next_request();
}

void Connection::next_request() {
  busy_ = false;
  link_.reset();
  probe_timer_.cancel();
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

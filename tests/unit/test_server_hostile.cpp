// Hostile and careless clients against HttpServer on 127.0.0.1 (docs/serving.md, "Limits and
// vanished clients"): slow headers, slow bodies, 1,000 idle sockets, the connection and
// per-address stream caps, clients that vanish before and during their answer (streaming or
// not), malformed HTTP and JSON. Each checks that a good request made meanwhile is answered
// correctly, and that the work of vanished clients is freed (running requests and KV bytes back
// to 0). The model-free EchoBackend serves most; the real default model checks KV bytes. The
// deadlines here are loose bounds against hanging; bench/hostile_clients.py measures the times.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "server/api_handler.h"
#include "server/engine_backend.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "support/echo_backend.h"
#include "test_server_support.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

using namespace mpkv;
using namespace mpkv::server;
using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {
constexpr auto kInTime = 5s;  // loose: a starved server never answers (the figures are the bench's)

// A blocking client socket on 127.0.0.1 that sends what it is told and reads with a deadline.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return connected_ && ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // Reads until the server closes, `stop` says the bytes are enough, or `limit` passes.
  std::string read(std::chrono::milliseconds limit, const std::function<bool(const std::string&)>& stop = {}) {
    std::string got;
    const auto end = Clock::now() + limit;
    char buf[4096];
    while (Clock::now() < end && !(stop && stop(got))) {
      timeval tv{0, 50000};
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) break;
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  void shutdown_send() { ::shutdown(fd_, SHUT_WR); }  // half-close: no more bytes from us, still reading
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

std::string post_bytes(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

int status_of(const std::string& response) {
  return response.rfind("HTTP/1.1 ", 0) == 0 && response.size() >= 12 ? std::stoi(response.substr(9, 3)) : 0;
}

// A good non-streaming completion and a good stream, each answered correctly within kInTime.
void expect_good_requests_answered(int port) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(10, 0);
  const auto t0 = Clock::now();
  auto res = cli.Post("/v1/completions", R"({"prompt": "hello", "max_tokens": 3})", "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], "hel");
  res = cli.Post("/v1/completions", R"({"prompt": "hello", "max_tokens": 2, "stream": true})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos) << res->body;
  EXPECT_LT(Clock::now() - t0, kInTime);
}

// Polls `done` every 10 ms for up to `limit`.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  for (const auto end = Clock::now() + limit; Clock::now() < end; std::this_thread::sleep_for(10ms))
    if (done()) return true;
  return done();
}

// Lets this test process hold `n` descriptors (client and server ends of every socket).
bool allow_open_files(rlim_t n) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur >= n) return true;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < n) return false;
  lim.rlim_cur = n;
  return setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

// The echo model behind a server with short read deadlines.
struct EchoServer {
  explicit EchoServer(HttpServerOptions o = short_deadlines()) : handler(HandlerOptions{}), backend(100000, 64) {
    handler.set_backend(&backend);
    http = std::make_unique<HttpServer>(handler, o);
    port = http->start();
  }
  static HttpServerOptions short_deadlines() {
    HttpServerOptions o;
    o.port = 0;
    o.threads = 8;
    o.header_timeout_seconds = 2;
    o.body_timeout_seconds = 2;
    return o;
  }
  bool idle() { return backend.metrics().running == 0 && backend.metrics().kv_bytes_used == 0 && handler.in_flight().size() == 0; }

  ApiHandler handler;
  EchoBackend backend;
  server::test::Stepper stepper{backend};
  std::unique_ptr<HttpServer> http;
  int port = 0;
};

const std::string kLong = R"({"prompt": "hello", "max_tokens": 90000)";  // never ends by itself here
}  // namespace

TEST(ServerHostile, SlowHeadersAndSlowBodiesStarveNobody) {
  EchoServer s;
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 300; ++i) {  // a request line and one header, then nothing
    slow.push_back(std::make_unique<RawClient>(s.port));
    ASSERT_TRUE(slow.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"));
  }
  for (int i = 0; i < 300; ++i) {  // headers and one byte of a declared 100 KB body
    slow.push_back(std::make_unique<RawClient>(s.port));
    ASSERT_TRUE(slow.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"));
  }
  ASSERT_TRUE(eventually([&] { return s.http->open_connections() == 600; }));
  expect_good_requests_answered(s.port);
  // Past their deadlines (2 s) the server closes them all, without an answer.
  EXPECT_TRUE(eventually([&] { return s.http->open_connections() == 0; }));
  EXPECT_EQ(slow.front()->read(1s), "");
  EXPECT_EQ(slow.back()->read(1s), "");
}

TEST(ServerHostile, AThousandIdleConnectionsStarveNobody) {
  if (!allow_open_files(4096)) GTEST_SKIP() << "the hard limit on open files is below 4096";
  HttpServerOptions o = EchoServer::short_deadlines();
  o.header_timeout_seconds = 60;  // idle for the whole test
  o.max_connections = 1100;
  EchoServer s(o);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(std::make_unique<RawClient>(s.port));
    ASSERT_TRUE(idle.back()->connected()) << i;
  }
  ASSERT_TRUE(eventually([&] { return s.http->open_connections() == 1000; })) << s.http->open_connections();
  expect_good_requests_answered(s.port);
  idle.clear();
  EXPECT_TRUE(eventually([&] { return s.http->open_connections() == 0; }));
}

TEST(ServerHostile, PastTheConnectionCapNewConnectionsGet503) {
  HttpServerOptions o = EchoServer::short_deadlines();
  o.header_timeout_seconds = 60;
  o.max_connections = 20;
  EchoServer s(o);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(std::make_unique<RawClient>(s.port));
  ASSERT_TRUE(eventually([&] { return s.http->open_connections() == 20; }));
  RawClient extra(s.port);
  ASSERT_TRUE(extra.send(post_bytes("/v1/completions", R"({"prompt": "hi"})")));
  const std::string r = extra.read(5s);
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos) << r;
  EXPECT_NE(r.find("\"error\""), std::string::npos) << r;
  idle.clear();
  ASSERT_TRUE(eventually([&] { return s.http->open_connections() == 0; }));
  expect_good_requests_answered(s.port);
}

TEST(ServerHostile, PastTheStreamCapOfAnAddressNewStreamsGet429) {
  HttpServerOptions o = EchoServer::short_deadlines();
  o.max_streams_per_client = 2;
  EchoServer s(o);
  std::vector<std::unique_ptr<RawClient>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_unique<RawClient>(s.port));
    ASSERT_TRUE(streams.back()->send(post_bytes("/v1/completions", kLong + R"(, "stream": true})")));
    EXPECT_EQ(status_of(streams.back()->read(5s, [](const std::string& b) { return b.find("data:") != b.npos; })), 200);
  }
  const uint64_t prompt_tokens = s.backend.metrics().prompt_tokens_total;
  RawClient third(s.port);
  ASSERT_TRUE(third.send(post_bytes("/v1/completions", kLong + R"(, "stream": true})")));
  const std::string r = third.read(5s, [](const std::string& b) { return b.find("}}") != b.npos; });
  EXPECT_EQ(status_of(r), 429) << r;
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos) << r;
  EXPECT_NE(r.find("rate_limit_exceeded"), std::string::npos) << r;
  EXPECT_EQ(s.backend.metrics().prompt_tokens_total, prompt_tokens);  // the refused one never reached the engine
  EXPECT_EQ(s.backend.metrics().running, 2);
  streams.clear();
  EXPECT_TRUE(eventually([&] { return s.idle(); }));
  expect_good_requests_answered(s.port);  // the address may stream again
}

TEST(ServerHostile, VanishedClientsFreeTheirWorkStreamingOrNot) {
  EchoServer s;
  struct Case {
    const char* what;
    bool stream;
    std::chrono::milliseconds stay;  // before closing: 0 = at once, before the request is handled
  };
  for (const Case& c : {Case{"non-streaming, at once", false, 0ms}, Case{"non-streaming, during", false, 300ms},
                        Case{"streaming, at once", true, 0ms}, Case{"streaming, during", true, 300ms}}) {
    SCOPED_TRACE(c.what);
    {
      RawClient quitter(s.port);
      // n = 3: the three choices' requests all go
      ASSERT_TRUE(quitter.send(post_bytes("/v1/completions", kLong + (c.stream ? R"(, "n": 3, "stream": true})" : R"(, "n": 3})"))));
      if (c.stay > 0ms) {
        ASSERT_TRUE(eventually([&] { return s.backend.metrics().running == 3; }));
        std::this_thread::sleep_for(c.stay);
      }
    }
    expect_good_requests_answered(s.port);
    EXPECT_TRUE(eventually([&] { return s.idle(); })) << "running " << s.backend.metrics().running;
  }
}

// A client that pipelines its next request behind a long one, then vanishes: the pipelined bytes
// must not stop the watch, so the long request is still aborted.
TEST(ServerHostile, APipeliningClientThatVanishesFreesItsWork) {
  EchoServer s;
  {
    RawClient c(s.port);
    ASSERT_TRUE(c.send(post_bytes("/v1/completions", kLong + "}")));
    ASSERT_TRUE(eventually([&] { return s.backend.metrics().running == 1; }));
    ASSERT_TRUE(c.send(post_bytes("/v1/completions", R"({"prompt": "hi", "max_tokens": 1})")));
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(eventually([&] { return s.idle(); })) << "running " << s.backend.metrics().running;
  // Pipelined requests of a client that stays are answered in order.
  RawClient c(s.port);
  ASSERT_TRUE(c.send(post_bytes("/v1/completions", R"({"prompt": "abc", "max_tokens": 3})") +
                     post_bytes("/v1/completions", R"({"prompt": "xyz", "max_tokens": 2})")));
  const std::string r = c.read(5s, [](const std::string& b) { return b.find("\"xy\"") != b.npos; });
  const size_t first = r.find("\"abc\""), second = r.find("\"xy\"");
  ASSERT_NE(first, std::string::npos) << r;
  ASSERT_NE(second, std::string::npos) << r;
  EXPECT_LT(first, second);
}

// A client that shuts down its sending side after the request (as `curl --no-keepalive` with some
// proxies, or `nc -N`, do) still reads: it gets its answer, streaming or not; HTTP/1.1 clients may
// see an interim "100 Continue" first. A client that closes for good is still noticed
// (VanishedClientsFreeTheirWorkStreamingOrNot).
TEST(ServerHostile, HalfClosedClientsGetTheirAnswer) {
  EchoServer s;
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    RawClient c(s.port);
    const std::string body = std::string(R"({"prompt": "hello", "max_tokens": 40)") + (stream ? R"(, "stream": true})" : "}");
    ASSERT_TRUE(c.send(post_bytes("/v1/completions", body)));
    c.shutdown_send();
    const std::string r = c.read(10s);  // until the server closes
    EXPECT_NE(r.find("HTTP/1.1 200 OK"), std::string::npos) << r.substr(0, 400);
    EXPECT_NE(r.find(stream ? "data: [DONE]" : "\"finish_reason\":\"length\""), std::string::npos) << r.substr(0, 400);
  }
  EXPECT_TRUE(eventually([&] { return s.idle(); }));
}

// HTTP/1.0 has no chunked encoding: a stream is sent as it is, "Connection: close", and ends when
// the server closes.
TEST(ServerHostile, Http10StreamsAreNotChunked) {
  EchoServer s;
  RawClient c(s.port);
  const std::string body = R"({"prompt": "hello", "max_tokens": 3, "stream": true})";
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  const std::string r = c.read(5s);  // until the server closes
  const size_t head_end = r.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << r;
  const std::string head = r.substr(0, head_end), rest = r.substr(head_end + 4);
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(head.find("chunked"), std::string::npos) << head;
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
  EXPECT_EQ(rest.rfind("data: {", 0), 0u) << rest;  // no chunk size line
  EXPECT_EQ(rest.size() - rest.rfind("data: [DONE]\n\n"), std::string("data: [DONE]\n\n").size()) << rest;
}

TEST(ServerHostile, MalformedRequestsGet4xxAndStarveNobody) {
  EchoServer s;
  const std::string deep_arrays(200000, '[');
  std::string deep_objects;
  for (int i = 0; i < 50000; ++i) deep_objects += R"({"a":)";
  const std::string huge_string = R"({"prompt": ")" + std::string(900000, 'x') + R"(", "max_tokens": 1})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"deep arrays", post_bytes("/v1/chat/completions", deep_arrays)},
      {"deep objects", post_bytes("/v1/chat/completions", deep_objects)},
      {"invalid UTF-8", post_bytes("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\xc3\"}]}")},
      {"huge exponent", post_bytes("/v1/completions", R"({"prompt": "hi", "max_tokens": 1e999999})")},
      {"huge integer", post_bytes("/v1/completions", R"({"prompt": "hi", "max_tokens": 123456789012345678901234567890})")},
      {"huge temperature", post_bytes("/v1/completions", R"({"prompt": "hi", "temperature": 1e308})")},
      {"huge string", post_bytes("/v1/completions", huge_string)},
      {"body over the limit", post_bytes("/v1/completions", std::string(2 << 20, ' '))},
      {"garbage request line", "GARBAGE\r\n\r\n"},
      {"header without a colon", "GET /health HTTP/1.1\r\nHost x\r\n\r\n"},
      {"bad Content-Length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"},
      {"bad chunk", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
      {"headers over the limit", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(40000, 'a') + "\r\n\r\n"},
  };
  for (const auto& [what, bytes] : cases) {
    SCOPED_TRACE(what);
    RawClient c(s.port);
    ASSERT_TRUE(c.send(bytes));
    const std::string r = c.read(10s, [](const std::string& b) { return b.find("}}") != b.npos; });
    const int status = status_of(r);
    EXPECT_TRUE(status >= 400 && status < 500) << r.substr(0, 400);
    EXPECT_NE(r.find("\"error\""), std::string::npos) << r.substr(0, 400);
  }
  expect_good_requests_answered(s.port);
  EXPECT_TRUE(eventually([&] { return s.idle(); }));
}

// The real default model: clients that vanish while their non-streaming or streamed answers are
// generated free their KV bytes (read from /metrics), with and without having waited.
TEST(ServerHostile, RealModelVanishedClientsFreeKvBytes) {
  const std::string path = mpkv::test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "the default model is absent (scripts/get_model.sh)";
  auto model = Model::load(path);
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  KvCacheOptions kv;
  kv.model = kv_model_identity(*model);
  EngineOptions eo;
  eo.n_ctx = 1024;
  Engine engine(*model, tok, make_kv_cache(kv, model->config().kv_dims()), eo);
  EngineBackend backend(engine);
  ApiHandler handler(HandlerOptions{});
  handler.set_backend(&backend);
  EngineLoop loop(engine);
  HttpServerOptions o = EchoServer::short_deadlines();
  HttpServer http(handler, o);
  const int port = http.start();
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(30, 0);
  const auto kv_bytes_metric = [&] {
    auto m = cli.Get("/metrics");
    const size_t at = m ? m->body.find("\nmpkv:kv_bytes_used{") : std::string::npos;
    return at == std::string::npos ? -1.0 : std::stod(m->body.substr(m->body.find("} ", at) + 2));
  };
  const std::string body = R"({"messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 900,
                                "ignore_eos": true)";
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming" : "non-streaming");
    std::vector<std::unique_ptr<RawClient>> quitters;
    for (int i = 0; i < 4; ++i) {
      quitters.push_back(std::make_unique<RawClient>(port));
      ASSERT_TRUE(quitters.back()->send(post_bytes("/v1/chat/completions", body + (stream ? R"(, "stream": true})" : "}"))));
    }
    ASSERT_TRUE(eventually([&] { return engine.metrics().running == 4; }, 30s));
    std::this_thread::sleep_for(500ms);
    EXPECT_GT(kv_bytes_metric(), 0.0);
    quitters.clear();
    EXPECT_TRUE(eventually([&] { return engine.metrics().running == 0 && kv_bytes_metric() == 0.0; }, 10s))
        << "running " << engine.metrics().running << ", KV bytes " << engine.metrics().kv_bytes_used;
    auto good = cli.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})",
                         "application/json");
    ASSERT_TRUE(good);
    EXPECT_EQ(good->status, 200) << good->body;
    EXPECT_EQ(json::parse(good->body)["usage"]["completion_tokens"], 4);
  }
  EXPECT_TRUE(eventually([&] { return handler.in_flight().size() == 0; }));
  http.stop();
  loop.stop();
}

// mpkv serve: the OpenAI-compatible HTTP server over the continuous-batching engine
// (docs/serving.md). It listens first (/health answers 503 while the model loads), then loads the
// model, builds the KV cache from the --kv-* options and serves until SIGINT / SIGTERM: new
// requests get 503, in-flight ones may finish until --shutdown-timeout, the rest are aborted, and
// it exits 0.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "bench_roofline.h"
#include "cli_options.h"
#include "commands.h"
#include "engine/engine.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "model/model.h"
#include "server/api_handler.h"
#include "server/engine_backend.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/shutdown.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {
struct ServeArgs {
  std::string model, served_name;
  server::HttpServerOptions http;
  server::HandlerOptions api;
  EngineOptions engine;
  KvCacheOptions kv;
  int threads = 0;
  double shutdown_timeout_s = 10.0;
  size_t max_body_kib = 1024;
  GrammarCompilerOptions grammar;
  int64_t grammar_timeout_ms = 10000;
  bool probe_limits = false;
};

// Structured outputs' compiler (docs/structured_outputs.md, "Compilation").
void add_grammar_options(CLI::App* sub, ServeArgs& a) {
  sub->add_option("--grammar-compile-timeout-ms", a.grammar_timeout_ms,
                  "a constraint whose compile runs longer is refused with 400 (it goes on compiling and is cached); "
                  "one whose compile has not started by then (queued) gets 503")
      ->capture_default_str()->check(integer_in(1, 3600 * 1000, "in [1, 3600000]"));
  sub->add_option("--grammar-max-bytes", a.grammar.max_text_bytes, "schemas / grammars / regexes above this size get 400")
      ->capture_default_str()->check(integer_in(1, 1 << 24, ">= 1"));
  sub->add_option("--grammar-cache", a.grammar.cache_entries, "compiled constraints kept (least recently used dropped)")
      ->capture_default_str()->check(integer_in(1, 1 << 20, ">= 1"));
}

// Waits for SIGINT / SIGTERM (or a broken engine loop). Returns true on a signal.
bool wait_for_shutdown(server::ShutdownSignal& signals, const server::EngineLoop& loop) {
  for (;;) {
    if (const int sig = signals.wait(std::chrono::milliseconds(200))) {
      std::fprintf(stderr, "[serve] signal %d: draining (up to the shutdown timeout)\n", sig);
      return true;
    }
    if (loop.failed()) return false;
  }
}

// The transport's limits (server/http_server.h; docs/serving.md, "Limits and vanished clients").
void add_http_options(CLI::App* sub, server::HttpServerOptions& h) {
  sub->add_option("--http-threads", h.threads, "completions handled at once (a non-streaming one holds a thread while it runs)")
      ->capture_default_str()->check(integer_in(1, 1 << 16, ">= 1"));
  sub->add_option("--header-timeout", h.header_timeout_seconds,
                  "seconds a connection may take to send a request's headers (idle keep-alive included)")
      ->capture_default_str()->check(integer_in(1, 3600, "in [1, 3600]"));
  sub->add_option("--body-timeout", h.body_timeout_seconds, "seconds a client may take to send a request's body")
      ->capture_default_str()->check(integer_in(1, 3600, "in [1, 3600]"));
  sub->add_option("--write-timeout", h.write_timeout_seconds, "seconds one write of an answer may wait for the client to read")
      ->capture_default_str()->check(integer_in(1, 3600, "in [1, 3600]"));
  sub->add_option("--max-connections", h.max_connections, "connections open at once; more get 503 + Retry-After")
      ->capture_default_str()->check(integer_in(1, 1 << 20, ">= 1"));
  sub->add_option("--max-streams-per-client", h.max_streams_per_client,
                  "concurrent streamed answers to one client address; more get 429 + Retry-After")
      ->capture_default_str()->check(integer_in(1, 1 << 20, ">= 1"));
}

void run_serve(ServeArgs a) {
  validate(a.kv);  // before anything starts
  server::ShutdownSignal signals;  // before any thread, so the signals reach only wait()
  a.api.model_name = a.served_name.empty() ? std::filesystem::path(a.model).stem().string() : a.served_name;
  a.api.max_body_bytes = a.max_body_kib * 1024;
  server::ApiHandler handler(a.api);
  server::HttpServer http(handler, a.http);
  const int port = http.start();
  std::printf("listening on http://%s:%d\n", a.http.host.c_str(), port);
  std::fflush(stdout);

  const int threads = apply_threads(a.threads);
  if (a.probe_limits) {  // before the model loads: nothing else runs yet (docs/serving.md "Roofline counters")
    const MachineLimits m = probe_machine_limits(threads);
    handler.metrics().set_machine_limits({m.read_gbs * 1e9, m.int8_peak_macs, m.threads});
    std::fprintf(stderr, "[serve] machine limits: %s\n", describe(m).c_str());
  }
  auto model = load_model(a.model, a.engine.n_ctx);
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  KvCacheOptions kv = a.kv;
  kv.model = kv_model_identity(*model);
  Engine engine(*model, tok, make_kv_cache(kv, model->config().kv_dims()), a.engine);
  a.grammar.compile_timeout = std::chrono::milliseconds(a.grammar_timeout_ms);
  server::EngineBackend backend(engine, a.grammar);
  if (!tok.has_chat_template())  // docs/chat_templates.md, "Without a template"
    std::fprintf(stderr, "[serve] the model has no tokenizer.chat_template: chat requests use the %s format\n",
                 tok.chat_format_description().c_str());
  server::EngineLoop loop(engine);
  handler.set_backend(&backend);
  std::fprintf(stderr, "[serve] ready: model %s, %s, n_ctx %d, max %d sequences, %d tokens per step, queue %d, %d threads%s\n",
               a.api.model_name.c_str(), describe(a.kv).c_str(), a.engine.n_ctx, a.engine.max_seqs,
               a.engine.max_batch_tokens, a.engine.max_queue, threads, a.api.api_key.empty() ? "" : ", API key required");

  const bool by_signal = wait_for_shutdown(signals, loop);
  const auto deadline = std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_timeout_s * 1000));
  const size_t aborted = server::drain(handler, backend, by_signal ? deadline : std::chrono::milliseconds(0));
  http.stop();
  loop.stop();
  std::fprintf(stderr, "[serve] stopped; %zu request(s) aborted at shutdown\n", aborted);
  if (!by_signal) throw InternalError("the engine loop failed: " + loop.failure());  // exit 2 (docs/serving.md)
}
}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching, one KV budget)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("--host", a->http.host, "address to listen on (loopback unless told otherwise)")->capture_default_str();
  sub->add_option("--port", a->http.port, "TCP port (0: an ephemeral port, printed on start)")->capture_default_str()
      ->check(integer_in(0, 65535, "in [0, 65535]"));
  sub->add_option("--served-model-name", a->served_name, "model id in /v1/models and responses (default: file stem)");
  sub->add_option("--api-key", a->api.api_key, "require Authorization: Bearer KEY on every endpoint but /health");
  sub->add_option("-c,--ctx-size", a->engine.n_ctx, "context per request (prompt + generated)")->capture_default_str()
      ->check(integer_in(2, 1 << 24, ">= 2"));
  sub->add_option("--max-seqs", a->engine.max_seqs, "requests running at once")->capture_default_str()
      ->check(integer_in(1, 1 << 16, ">= 1"));
  sub->add_option("--max-batch-tokens", a->engine.max_batch_tokens, "tokens per engine step (decode + prefill chunks)")
      ->capture_default_str()->check(integer_in(1, 1 << 24, ">= 1"));
  sub->add_option("--max-queue", a->engine.max_queue, "requests waiting before 503 + Retry-After")->capture_default_str()
      ->check(integer_in(1, 1 << 24, ">= 1"));
  sub->add_option("--admission-overcommit", a->engine.admission_overcommit,
                  "admit up to budget x this many projected bytes (1: never preempt; > 1: admit more, preempt when short)")
      ->capture_default_str()->check(number_in(1.0, 1e6, ">= 1"));
  add_prefix_cache_options(sub, a->engine.prefix_cache, a->engine.prefix_cache_floor_bits);
  add_http_options(sub, a->http);
  add_grammar_options(sub, *a);
  sub->add_option("--max-body-kib", a->max_body_kib, "request bodies above this get 413")->capture_default_str()
      ->check(integer_in(1, 1 << 20, ">= 1"));
  sub->add_option("--reasoning-budget", a->api.reasoning_budget,
                  "thinking tokens per chat request before </think> is forced (-1: unlimited, 0: no thinking; "
                  "a request's reasoning_budget_tokens overrides it)")
      ->capture_default_str()->check(integer_in(-1, 1 << 24, "in [-1, 16777216]"));
  sub->add_option("--shutdown-timeout", a->shutdown_timeout_s, "seconds in-flight requests may finish after SIGINT/SIGTERM")
      ->capture_default_str()->check(number_in(0.0, 3600.0, "in [0, 3600]"));
  sub->add_flag("--probe-machine-limits", a->probe_limits,
                "probe the read bandwidth and int8 peak once at startup (about a second, 256 MiB) for /metrics' "
                "roofline gauges (the serving benchmark's report divides by them)");
  add_threads_option(sub, a->threads);
  add_kv_cache_options(sub, a->kv);
  sub->callback([a, sub] {
    check_kv_flags(sub, a->kv);
    cap_kv_sizes(a->kv, a->engine.n_ctx);
    run_serve(*a);
  });
}

}  // namespace mpkv::cli

// libFuzzer entry: any bytes as the body of any route must give an answer, never a crash, an
// ASan report, an escaped exception or a 500 (an internal error). The model is an EchoBackend
// that finishes each request inside add_request, so streams are drained right here; or, for the
// tool-call and thinking parsers, a ScriptBackend with a small template that has Hermes tool
// calls and <think> (its "model" says the last user message, so fuzzed text reaches the parsers).
// Built only with -DMPKV_FUZZ=ON (clang).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/api_handler.h"
#include "support/echo_backend.h"
#include "support/script_backend.h"

namespace {

mpkv::server::HandlerOptions options() {
  mpkv::server::HandlerOptions o;
  o.api_key = "k";
  o.max_body_bytes = 1 << 16;
  return o;
}

mpkv::server::ApiHandler& handler() {
  static mpkv::server::EchoBackend backend(/*n_ctx=*/512, /*max_queue=*/4, /*immediate=*/true);
  static mpkv::server::ApiHandler h(options());
  static bool ready = (h.set_backend(&backend), true);
  (void)ready;
  return h;
}

mpkv::server::ApiHandler& tool_handler() {
  static mpkv::server::ScriptBackend backend(mpkv::server::kSmallToolTemplate, /*n_ctx=*/512, /*max_queue=*/4, /*immediate=*/true);
  static mpkv::server::ApiHandler h(options());
  static bool ready = (h.set_backend(&backend), true);
  (void)ready;
  return h;
}

}  // namespace

// data[0] picks the route (% 8), the method (/ 8 % 4 == 3: GET, else POST), the key (/ 32 % 2:
// the right one) and the backend (/ 64 % 2: the tool-template one), so a seed " {json}" is an
// authorized chat POST, "`" the same to the tool template, "!" completions, "&" /tokenize and "'"
// /detokenize (scripts/fuzz_request.sh seeds the corpus so).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kPaths[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/metrics", "/health",
                                       "/nope", "/tokenize", "/detokenize"};
  if (size == 0) return 0;
  mpkv::server::HttpRequest req;
  req.path = kPaths[data[0] % 8];
  req.method = (data[0] / 8) % 4 == 3 ? "GET" : "POST";
  req.authorization = (data[0] / 32) % 2 ? "Bearer k" : "Bearer x";
  req.body.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  mpkv::server::HttpResponse r = ((data[0] / 64) % 2 ? tool_handler() : handler()).handle(req);
  if (r.status >= 500 && r.status != 503) std::abort();
  if (r.stream) {
    std::string piece;
    for (int i = 0; i < 100000 && r.stream->next(piece, std::chrono::milliseconds(0));) ++i;
  }
  return 0;
}

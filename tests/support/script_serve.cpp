// mpkv_script_serve: the real HTTP server and API handler over ScriptBackend (script_backend.h), for
// end-to-end tests of what needs a known model output (tests/e2e/test_serve_tools.py: tool calls
// and thinking through the official openai client). Not a model: the "model" repeats the last user
// message (or reports the last tool result).
// Usage: mpkv_script_serve [--template FILE.jinja] [--reasoning-budget N]
// Prints "listening on http://127.0.0.1:PORT" (an ephemeral port) and serves until SIGINT / SIGTERM.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "server/api_handler.h"
#include "server/http_server.h"
#include "server/shutdown.h"
#include "support/script_backend.h"

using namespace mpkv::server;

int main(int argc, char** argv) {
  std::string template_source;
  HandlerOptions api;
  api.model_name = "script";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--template") == 0) {
      std::ifstream in(argv[i + 1]);
      if (!in) {
        std::fprintf(stderr, "mpkv_script_serve: cannot read %s\n", argv[i + 1]);
        return 1;
      }
      std::stringstream ss;
      ss << in.rdbuf();
      template_source = ss.str();
    } else if (std::strcmp(argv[i], "--reasoning-budget") == 0) {
      api.reasoning_budget = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: mpkv_script_serve [--template FILE] [--reasoning-budget N]\n");
      return 1;
    }
  }
  ShutdownSignal signals;
  ScriptBackend backend(template_source, 8192, 64);
  ApiHandler handler(api);
  HttpServerOptions http;
  http.port = 0;
  HttpServer server(handler, http);
  const int port = server.start();
  std::printf("listening on http://127.0.0.1:%d\n", port);
  std::fflush(stdout);
  handler.set_backend(&backend);
  std::atomic<bool> stop{false};
  std::thread stepper([&] {
    while (!stop) {
      if (!backend.step()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  while (!signals.wait(std::chrono::milliseconds(200))) {
  }
  drain(handler, backend, std::chrono::milliseconds(0));
  server.stop();
  stop = true;
  stepper.join();
  return 0;
}

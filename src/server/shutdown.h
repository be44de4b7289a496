// Graceful shutdown (docs/serving.md, "Shutdown"): SIGINT / SIGTERM are taken synchronously by
// the main thread; then new requests get 503, in-flight requests may finish until a deadline, and
// whatever is still running is aborted.
#pragma once
#include <chrono>

#include "server/api_handler.h"

namespace mpkv::server {

class ShutdownSignal {
 public:
  // Blocks SIGINT and SIGTERM in the calling thread, and so in every thread it starts afterwards:
  // make it before any thread, and the signals only arrive through wait(). Either one ignored by
  // the parent (a shell's background job ignores SIGINT) is taken again.
  ShutdownSignal();
  // Waits up to `timeout` for SIGINT or SIGTERM; returns the signal number, or 0.
  int wait(std::chrono::milliseconds timeout);
};

// Stops taking requests, waits up to `deadline` for the in-flight ones, aborts the rest and
// waits up to `abort_grace` for their final events. Returns how many were aborted.
size_t drain(ApiHandler& handler, Backend& backend, std::chrono::milliseconds deadline,
             std::chrono::milliseconds abort_grace = std::chrono::milliseconds(5000));

}  // namespace mpkv::server

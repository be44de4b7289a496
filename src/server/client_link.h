// Whether the client behind a request is still connected, as the transport sees it
// (docs/serving.md, "Limits and vanished clients"). The HTTP adapter calls close() when the
// client's socket closes before its answer is written; a request being computed registers what
// aborts it (on_close), so a vanished non-streaming client frees its pages at the next engine
// step instead of when its answer is done. Thread-safe: close() runs on the I/O thread, on_close
// on the thread that computes the answer.
#pragma once
#include <functional>
#include <memory>
#include <mutex>

namespace mpkv::server {

class ClientLink {
 public:
  // Runs `abort` once when the client goes away (at once when it already has). An empty function
  // unregisters.
  void on_close(std::function<void()> abort);
  // The transport saw the connection close: runs the registered function (idempotent).
  void close();
  bool closed() const;

 private:
  mutable std::mutex mu_;
  std::function<void()> abort_;
  bool closed_ = false;
};

// Registers `abort` with `link` (may be null: no transport, as in unit tests) for its lifetime.
class AbortOnClose {
 public:
  AbortOnClose(std::shared_ptr<ClientLink> link, std::function<void()> abort);
  ~AbortOnClose();
  AbortOnClose(const AbortOnClose&) = delete;
  AbortOnClose& operator=(const AbortOnClose&) = delete;

 private:
  std::shared_ptr<ClientLink> link_;
};

}  // namespace mpkv::server

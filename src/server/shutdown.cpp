#include "server/shutdown.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>

namespace mpkv::server {

namespace {
sigset_t shutdown_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}
}  // namespace

ShutdownSignal::ShutdownSignal() {
  const sigset_t s = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  // A shell starts background jobs (`mpkv serve &` in a script) with SIGINT ignored. Threads made
  // before this point (OpenBLAS starts its own when the library loads) do not block the signals,
  // and one of them takes a SIGINT sent while the model loads and, ignored, drops it: the server
  // would never stop. With the default action such a signal ends the loading process instead;
  // once serving, wait() takes it (docs/serving.md, "Shutdown").
  for (const int sig : {SIGINT, SIGTERM}) signal(sig, SIG_DFL);
}

int ShutdownSignal::wait(std::chrono::milliseconds timeout) {
  const sigset_t s = shutdown_signals();
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000L};
  const int sig = sigtimedwait(&s, nullptr, &ts);
  return sig > 0 ? sig : 0;  // -1 with EAGAIN (timeout) or EINTR
}

size_t drain(ApiHandler& handler, Backend& backend, std::chrono::milliseconds deadline,
             std::chrono::milliseconds abort_grace) {
  handler.begin_drain();
  InFlight& inflight = handler.in_flight();
  if (inflight.wait_empty(deadline)) return 0;
  const size_t n = inflight.size();
  inflight.abort_all(backend);
  inflight.wait_empty(abort_grace);
  return n;
}

}  // namespace mpkv::server

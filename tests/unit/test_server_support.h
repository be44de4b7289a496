// Shared by the server tests: an EchoBackend stepped on a thread, as the engine loop does.
#pragma once
#include <atomic>
#include <chrono>
#include <thread>

#include "support/echo_backend.h"

namespace mpkv::server::test {

class Stepper {
 public:
  explicit Stepper(EchoBackend& b) : t_([this, &b] {
      while (!stop_) {
        b.step();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }) {}
  ~Stepper() {
    stop_ = true;
    t_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread t_;
};

}  // namespace mpkv::server::test

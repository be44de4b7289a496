// Hands one request's output events from the engine's stepping thread to the HTTP thread that
// answers it. push() never blocks for long (it runs inside Engine::step).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "engine/request.h"

namespace mpkv::server {

class RequestChannel {
 public:
  void push(const RequestOutput& out);
  // Moves every queued event into `out` (appended), waiting up to `wait` for the first one.
  // Returns false when none came.
  bool pop(std::vector<RequestOutput>& out, std::chrono::milliseconds wait);

  // Called after each push, under the channel's lock (so it never runs after set_wakeup(nullptr)
  // returned); it must not block.
  void set_wakeup(std::function<void()> wake);

  // The engine's id of the request; 0 until add_request returned.
  void set_id(uint64_t id) { id_.store(id); }
  uint64_t id() const { return id_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> events_;
  std::function<void()> wake_;
  std::atomic<uint64_t> id_{0};
};

}  // namespace mpkv::server

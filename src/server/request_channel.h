// Hands the output events of one HTTP request's engine requests (one per choice) from the
// engine's stepping thread to the HTTP thread that answers it. push() never blocks for long (it runs inside Engine::step).
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

  // The engine's ids of the requests, as add_request returns them.
  void add_id(uint64_t id);
  std::vector<uint64_t> ids() const;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> events_;
  std::function<void()> wake_;
  mutable std::mutex ids_mu_;
  std::vector<uint64_t> ids_;
};

}  // namespace mpkv::server

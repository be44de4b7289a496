// The completions being answered right now, so shutdown can wait for them and abort the rest.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

#include "server/backend.h"
#include "server/request_channel.h"

namespace mpkv::server {

class InFlight {
 public:
  void add(const RequestChannel* c);
  void remove(const RequestChannel* c);
  size_t size() const;
  // Blocks until nothing is in flight or the timeout passes; true when nothing is.
  bool wait_empty(std::chrono::milliseconds timeout) const;
  // Aborts every request in flight, and from now on every request as soon as it is submitted.
  void abort_all(Backend& backend);
  bool aborting() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable empty_cv_;
  std::set<const RequestChannel*> channels_;
  bool aborting_ = false;
};

}  // namespace mpkv::server

#include "server/inflight.h"

namespace mpkv::server {

void InFlight::add(const RequestChannel* c) {
  std::lock_guard lock(mu_);
  channels_.insert(c);
}

void InFlight::remove(const RequestChannel* c) {
  {
    std::lock_guard lock(mu_);
    channels_.erase(c);
  }
  empty_cv_.notify_all();
}

size_t InFlight::size() const {
  std::lock_guard lock(mu_);
  return channels_.size();
}

bool InFlight::wait_empty(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return empty_cv_.wait_for(lock, timeout, [&] { return channels_.empty(); });
}

void InFlight::abort_all(Backend& backend) {
  std::lock_guard lock(mu_);
  aborting_ = true;
  for (const RequestChannel* c : channels_)
    for (uint64_t id : c->ids()) backend.abort(id);
}

bool InFlight::aborting() const {
  std::lock_guard lock(mu_);
  return aborting_;
}

}  // namespace mpkv::server

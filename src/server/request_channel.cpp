#include "server/request_channel.h"

namespace mpkv::server {

void RequestChannel::push(const RequestOutput& out) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(out);
    if (wake_) wake_();
  }
  cv_.notify_one();
}

void RequestChannel::set_wakeup(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  wake_ = std::move(wake);
}

bool RequestChannel::pop(std::vector<RequestOutput>& out, std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return false;
  for (RequestOutput& e : events_) out.push_back(std::move(e));
  events_.clear();
  return true;
}

void RequestChannel::add_id(uint64_t id) {
  std::lock_guard lock(ids_mu_);
  ids_.push_back(id);
}

std::vector<uint64_t> RequestChannel::ids() const {
  std::lock_guard lock(ids_mu_);
  return ids_;
}

}  // namespace mpkv::server

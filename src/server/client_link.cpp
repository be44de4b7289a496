#include "server/client_link.h"

namespace mpkv::server {

void ClientLink::on_close(std::function<void()> abort) {
  {
    std::lock_guard lock(mu_);
    if (!closed_) {
      abort_ = std::move(abort);
      return;
    }
  }
  if (abort) abort();  // already gone
}

void ClientLink::close() {
  std::function<void()> f;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    f.swap(abort_);
  }
  if (f) f();
}

bool ClientLink::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

AbortOnClose::AbortOnClose(std::shared_ptr<ClientLink> link, std::function<void()> abort) : link_(std::move(link)) {
  if (link_) link_->on_close(std::move(abort));
}

AbortOnClose::~AbortOnClose() {
  if (link_) link_->on_close(nullptr);
}

}  // namespace mpkv::server

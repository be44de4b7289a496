#include "kvcache/page_pool.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "util/error.h"
#include "util/units.h"

namespace mpkv {

size_t PagePool::free_bytes() const {
  if (budget_ == 0) return SIZE_MAX;
  return budget_ - std::min(budget_, used_ + held_);
}

void PagePool::charge(size_t bytes) {
  MPKV_CHECK(fits(bytes), "KV budget: " + std::to_string(bytes) + " more bytes would exceed the budget of " +
                              mib(budget_) + " (" + mib(used_) + " in use, " + mib(held_) + " held)");
  used_ += bytes;
  peak_ = std::max(peak_, used_);
}

void PagePool::charge_held(size_t bytes) {
  MPKV_ASSERT(bytes <= held_, "KV pool: charging more held bytes than are held");
  held_ -= bytes;
  used_ += bytes;
  peak_ = std::max(peak_, used_);
}

void PagePool::release(size_t bytes) {
  MPKV_ASSERT(bytes <= used_, "KV pool: releasing more bytes than are in use");
  used_ -= bytes;
}

void PagePool::hold(size_t bytes) {
  MPKV_CHECK(fits(bytes), "KV budget: cannot hold " + std::to_string(bytes) + " bytes within " + mib(budget_));
  held_ += bytes;
}

void PagePool::unhold(size_t bytes) {
  MPKV_ASSERT(bytes <= held_, "KV pool: releasing more held bytes than are held");
  held_ -= bytes;
}

void PagePool::set_shrinkable(uint64_t page_id, double cost, ShrinkQueue q) {
  MPKV_ASSERT(!std::isnan(cost), "KV pool: NaN shrink cost");
  forget(page_id);
  queue_[(int)q].insert({cost, page_id});
  cost_[page_id] = {q, cost};
}

void PagePool::forget(uint64_t page_id) {
  auto it = cost_.find(page_id);
  if (it == cost_.end()) return;
  queue_[(int)it->second.q].erase({it->second.cost, page_id});
  cost_.erase(it);
}

std::optional<uint64_t> PagePool::next_to_shrink(ShrinkQueue q) const {
  const auto& queue = queue_[(int)q];
  if (queue.empty()) return std::nullopt;
  return queue.begin()->second;
}

}  // namespace mpkv

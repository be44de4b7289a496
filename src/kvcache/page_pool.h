// The page pool's bookkeeping: one byte budget shared by every sequence, and the order in which
// pages are shrunk when it runs out. Plain data, no math (docs/design.md §3): the cache tells
// the pool what it allocates and frees and which pages can still shrink; the pool answers whether
// bytes fit and which page to shrink next.
//
// Budget: used + held <= budget at all times (budget 0 = unlimited). `held` are bytes promised to
// a sequence for its next forward pass (PagedKvCache::reserve, KvAccountant::hold), so the
// appends of that pass cannot fail half-way through the layers.
//
// Shrink order: the page whose next halving costs least goes first; among equal costs the oldest
// page (lowest id, ids grow with creation across all sequences). The cache sets the costs
// (KvAccountant::queue_next_shrink; docs/calibration.md "Progressive runtime"): with a calibrated progressive plan the
// sensitivity added per byte freed; without one -(highest bits among the page's shrinkable blocks),
// so the whole pool moves 16 -> 8 before any page goes 8 -> 4, oldest context first.
//
// Two queues: `running` holds pages some sequence reads (the order above); `cold` holds pages only
// the prefix cache keeps (prefix_index.h), ordered by how long ago their block was last used. The
// cache drains the cold queue first (docs/serving.md "Prefix cache": shrink before evict).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace mpkv {

enum class ShrinkQueue : uint8_t { running, cold };

class PagePool {
 public:
  explicit PagePool(size_t budget_bytes = 0) : budget_(budget_bytes) {}

  size_t budget() const { return budget_; }  // 0 = unlimited
  size_t used() const { return used_; }
  size_t held() const { return held_; }
  size_t peak_used() const { return peak_; }
  // Bytes that can still be charged or held without shrinking anything.
  size_t free_bytes() const;
  bool fits(size_t bytes) const { return budget_ == 0 || used_ + held_ + bytes <= budget_; }

  // Accounting of live allocations. charge() throws Error when the bytes do not fit;
  // charge_held() turns held bytes into used ones (they were checked when held).
  void charge(size_t bytes);
  void charge_held(size_t bytes);
  void release(size_t bytes);
  void hold(size_t bytes);    // throws Error when the bytes do not fit
  void unhold(size_t bytes);

  // Shrink queues: a page can shrink while some block of it is above its floor; `cost` is what its
  // next halving costs (lower goes first). A page is in at most one queue; set_shrinkable moves it.
  // forget() removes it (a page at its floor, or freed).
  void set_shrinkable(uint64_t page_id, double cost, ShrinkQueue q = ShrinkQueue::running);
  void forget(uint64_t page_id);
  // The next page of queue q to shrink; nullopt when none can.
  std::optional<uint64_t> next_to_shrink(ShrinkQueue q = ShrinkQueue::running) const;
  size_t shrinkable_pages(ShrinkQueue q = ShrinkQueue::running) const { return queue_[(int)q].size(); }

 private:
  struct Queued {
    ShrinkQueue q;
    double cost;
  };
  size_t budget_ = 0, used_ = 0, held_ = 0, peak_ = 0;
  // Per queue (cost, id): begin() is the next page to shrink.
  std::set<std::pair<double, uint64_t>> queue_[2];
  std::map<uint64_t, Queued> cost_;
};

}  // namespace mpkv

// The page pool's bookkeeping: one byte budget shared by every sequence, and the order in which
// pages are shrunk when it runs out. Plain data, no math (docs/design.md §3): the cache tells
// the pool what it allocates and frees and which pages can still shrink; the pool answers whether
// bytes fit and which page to shrink next.
//
// Budget: used + held <= budget at all times (budget 0 = unlimited). `held` are bytes promised to
// a sequence for its next forward pass (PagedKvCache::reserve), so the appends of that pass
// cannot fail half-way through the layers.
//
// Shrink order: the page whose next halving costs least goes first; among equal costs the oldest
// page (lowest id, ids grow with creation across all sequences). The cache sets the costs
// (PagedKvCache, docs/calibration.md "Progressive runtime"): with a calibrated progressive plan the
// sensitivity added per byte freed; without one -(highest bits among the page's shrinkable blocks),
// so the whole pool moves 16 -> 8 before any page goes 8 -> 4, oldest context first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace mpkv {

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

  // Shrink queue: a page can shrink while some block of it is above its final bits; `cost` is what
  // its next halving costs (lower goes first). forget() removes it (a page at its final bits, or freed).
  void set_shrinkable(uint64_t page_id, double cost);
  void forget(uint64_t page_id);
  // The next page to shrink by the order above; nullopt when nothing can shrink.
  std::optional<uint64_t> next_to_shrink() const;
  size_t shrinkable_pages() const { return queue_.size(); }

 private:
  size_t budget_ = 0, used_ = 0, held_ = 0, peak_ = 0;
  // (cost, id): begin() is the next page to shrink.
  std::set<std::pair<double, uint64_t>> queue_;
  std::map<uint64_t, double> cost_;
};

}  // namespace mpkv

// The page pool's bookkeeping: one byte budget shared by every sequence, and the order in which
// pages are shrunk when it runs out. Plain data, no math (DESIGN.md principle 3): the cache tells
// the pool what it allocates and frees and which pages can still shrink; the pool answers whether
// bytes fit and which page to shrink next.
//
// Budget: used + held <= budget at all times (budget 0 = unlimited). `held` are bytes promised to
// a sequence for its next forward pass (PagedKvCache::reserve), so the appends of that pass
// cannot fail half-way through the layers.
//
// Shrink order (ALGORITHMS.md 3, PM-KVQ): the page whose highest shrinkable block has the most
// bits goes first; among equals the oldest page (lowest id, ids grow with creation across all
// sequences). So the whole pool moves 16 -> 8 before any page goes 8 -> 4, like the reference
// code's per-layer steps, but one page at a time (short pauses), and old context (least likely
// to be attended sharply again in long generations) is shrunk before recent context.
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

  // Shrink queue: a page can shrink while some block of it is above its final bits; `top_bits` is
  // the highest current bits among those blocks. set_shrinkable(id, 0) (or forget) removes it.
  void set_shrinkable(uint64_t page_id, int top_bits);
  void forget(uint64_t page_id) { set_shrinkable(page_id, 0); }
  // The next page to shrink by the order above; nullopt when nothing can shrink.
  std::optional<uint64_t> next_to_shrink() const;
  size_t shrinkable_pages() const { return queue_.size(); }

 private:
  size_t budget_ = 0, used_ = 0, held_ = 0, peak_ = 0;
  // (-top_bits, id): begin() is the next page to shrink.
  std::set<std::pair<int, uint64_t>> queue_;
  std::map<uint64_t, int> top_bits_;
};

}  // namespace mpkv

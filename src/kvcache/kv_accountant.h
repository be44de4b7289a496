// Where a byte of the paged KV cache is charged and where a page shrinks (paged_kv_cache.h;
// docs/design.md "KV cache rooms"): the accountant over the page pool (page_pool.h). It keeps the
// running totals that admission and make_room read, charges sequences' bytes (from their
// reservation or from room made by shrinking), queues each page's next halving and performs it.
//
// Running totals (check_consistency recounts them from the records):
//   reclaimable  = sum over full pages that are not cold of (bytes - bytes at final bits)
//   cold_bytes   = sum over cold prefix blocks of their pages' bytes + page records + the block record
//   pinned_bytes = sum over prefix blocks with readers of the same at final bits
// A page is cold when its prefix block is (no sequence holds the block, prefix_index.h).
//
// Room is made in this order (docs/serving.md "Prefix cache"): cold cached pages shrink one halving
// at a time, coldest first, down to the prefix floor; then the coldest cold blocks are evicted (the
// prefix cache's evictor, prefix_cache.h); then the pages sequences read shrink, cheapest halving
// first: with a calibrated progressive plan (component sensitivities, kv_plan.h) the least
// sensitivity added per byte freed, otherwise most bits first; ties oldest first (PagePool;
// docs/calibration.md "Progressive runtime"). The pool never exceeds the budget.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "kvcache/kv_byte_model.h"
#include "kvcache/kv_cache_stats.h"
#include "kvcache/page_pool.h"
#include "kvcache/page_store.h"
#include "kvcache/prefix_index.h"

namespace mpkv {

class KvAccountant {
 public:
  KvAccountant(PageStore& store, const KvByteModel& bytes, size_t budget_bytes, bool shrink_by_cost);

  const PagePool& pool() const { return pool_; }
  // Bytes chargeable now if every full page sequences read shrank to its final bits and every cold
  // cached block were evicted (SIZE_MAX: no budget).
  size_t available_bytes() const;
  size_t pinned_bytes() const { return pinned_bytes_; }
  size_t cold_bytes() const { return cold_bytes_; }
  uint64_t cold_halvings() const { return cold_halvings_; }
  const ShrinkTotals& shrink_totals() const { return totals_; }
  void set_shrink_listener(std::function<void(const ShrinkPause&)> f) { on_pause_ = std::move(f); }
  // The prefix cache: its floor (0: each block's final bits) and the evictor free_one calls (bytes
  // freed by evicting the coldest evictable block; 0 when none).
  void set_prefix(int floor_bits, std::function<size_t()> evict_coldest);

  // ---- budget ----
  // Bytes seq's next n tokens add in every layer (a new sequence: its fixed bytes too).
  size_t bytes_needed(const KvSeqState* s, int n_tokens) const;
  // Frees room until `bytes` more fit; false (nothing changed) when they cannot.
  bool make_room(size_t bytes, int for_seq);
  // Frees room until `bytes` are freed or nothing more can go; returns the bytes freed.
  size_t shrink(size_t bytes);
  // Charges bytes to seq: from its reservation, else from room made; Error if impossible.
  void charge(KvSeqState& s, int seq, size_t bytes, const char* what);
  // Charges bytes that make_room has just made room for (or that fit).
  void charge_fitting(size_t bytes) { pool_.charge(bytes); }
  void release(size_t bytes) { pool_.release(bytes); }
  void hold(KvSeqState& s, size_t bytes);  // after make_room(bytes)
  void unhold(KvSeqState& s);

  // ---- pages ----
  void page_filled(KvPage& p);
  // One sequence fewer reads p: freed when none does and the prefix cache does not hold it.
  void unref_page(KvPage& p);
  // Gives a page's bytes back and destroys it (a page outside the running totals: evicted ones).
  void destroy_page(KvPage& p);
  // (Re)places the page in the pool's shrink queue with the cost of its next halving, or removes it.
  void queue_next_shrink(const KvPage& p);
  // Halves p's top blocks until none is above `bits` (never below a block's floor): tests.
  void shrink_page_to(KvPage& p, int bits);

  // ---- prefix blocks (prefix_cache.h moves them between hot and cold) ----
  size_t block_pool_bytes(const PrefixBlock& b, bool at_final_bits) const;
  void block_went_cold(const PrefixBlock& b);
  void block_went_hot(const PrefixBlock& b);
  void block_evicting(const PrefixBlock& b);  // before its pages are destroyed
  void pin(const PrefixBlock& b) { pinned_bytes_ += block_pool_bytes(b, true); }
  void unpin(const PrefixBlock& b) { pinned_bytes_ -= block_pool_bytes(b, true); }

  // Recounts every pool byte, reference and running total from the records (and the prefix index,
  // when there is one); InternalError on a mismatch.
  void check_consistency(const PrefixIndex* prefix) const;

 private:
  bool free_one(ShrinkPause& pause);
  void shrink_page(KvPage& p, ShrinkPause& pause);
  bool is_cold(const KvPage& p) const { return p.block != nullptr && p.block->holders == 0; }
  // A block's floor: its final bits, raised to the prefix floor while the page is cold.
  int block_floor(const KvPage& p, int block) const;
  // Highest current bits among the page's blocks above their floor (0: none).
  int shrink_top_bits(const KvPage& p) const;
  void record_pause(const ShrinkPause& pause);

  PageStore& store_;
  const KvByteModel& bytes_;
  PagePool pool_;
  bool shrink_by_cost_;  // progressive plan with component sensitivities
  size_t reclaimable_ = 0, cold_bytes_ = 0, pinned_bytes_ = 0;
  uint64_t cold_halvings_ = 0;
  int prefix_floor_bits_ = 0;
  std::function<size_t()> evict_coldest_;
  ShrinkTotals totals_;
  std::function<void(const ShrinkPause&)> on_pause_;
};

}  // namespace mpkv

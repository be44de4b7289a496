#include "kvcache/kv_accountant.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "util/error.h"
#include "util/units.h"

namespace mpkv {

KvAccountant::KvAccountant(PageStore& store, const KvByteModel& bytes, size_t budget_bytes, bool shrink_by_cost)
    : store_(store), bytes_(bytes), pool_(budget_bytes), shrink_by_cost_(shrink_by_cost) {}

size_t KvAccountant::available_bytes() const {
  return pool_.budget() == 0 ? SIZE_MAX : pool_.free_bytes() + reclaimable_ + cold_bytes_;
}

void KvAccountant::set_prefix(int floor_bits, std::function<size_t()> evict_coldest) {
  prefix_floor_bits_ = floor_bits;
  evict_coldest_ = std::move(evict_coldest);
}

// ---- budget ---------------------------------------------------------------------------------------

size_t KvAccountant::bytes_needed(const KvSeqState* s, int n) const {
  const int P = bytes_.page_tokens();
  size_t need = s ? 0 : bytes_.sequence_fixed_bytes();
  for (int l = 0; l < bytes_.dims().n_layer; ++l) {
    KvLayerFill fill;
    if (s) {
      const KvLayerState& ls = s->layers[l];
      fill.n_tokens = ls.n_tokens;
      fill.window_rows = ls.win_n;
      if (!ls.pages.empty() && ls.pages.back()->filled < P) fill.open_page_free = P - ls.pages.back()->filled;
    }
    need += bytes_.append_bytes(l, fill, n);
  }
  return need;
}

// One step of making room in the order of kv_accountant.h; false when nothing can go.
bool KvAccountant::free_one(ShrinkPause& pause) {
  if (const auto id = pool_.next_to_shrink(ShrinkQueue::cold)) {
    shrink_page(store_.page(*id), pause);
    return true;
  }
  if (evict_coldest_) {
    if (const size_t freed = evict_coldest_()) {
      pause.bytes_freed += freed;
      return true;
    }
  }
  if (const auto id = pool_.next_to_shrink(ShrinkQueue::running)) {
    shrink_page(store_.page(*id), pause);
    return true;
  }
  return false;
}

bool KvAccountant::make_room(size_t bytes, int for_seq) {
  if (pool_.fits(bytes)) return true;
  if (bytes > pool_.free_bytes() + reclaimable_ + cold_bytes_) return false;
  ShrinkPause pause;
  pause.for_seq = for_seq;
  const double t0 = now_s();
  while (!pool_.fits(bytes)) MPKV_ASSERT(free_one(pause), "KV pool: reclaimable bytes but nothing to shrink or evict");
  pause.seconds = now_s() - t0;
  record_pause(pause);
  return true;
}

void KvAccountant::record_pause(const ShrinkPause& pause) {
  totals_.pauses++;
  totals_.page_shrinks += pause.pages;
  totals_.bytes_freed += pause.bytes_freed;
  totals_.seconds += pause.seconds;
  totals_.max_pause_seconds = std::max(totals_.max_pause_seconds, pause.seconds);
  if (on_pause_) on_pause_(pause);
}

size_t KvAccountant::shrink(size_t bytes) {
  ShrinkPause pause;
  pause.for_seq = -1;
  while (pause.bytes_freed < bytes && free_one(pause)) {
  }
  return pause.bytes_freed;
}

void KvAccountant::charge(KvSeqState& s, int seq, size_t bytes, const char* what) {
  if (s.held >= bytes) {
    pool_.charge_held(bytes);
    s.held -= bytes;
    return;
  }
  const size_t rest = bytes - s.held;
  if (!make_room(rest, seq)) {
    throw Error("KV budget of " + mib(pool_.budget()) + " exhausted: sequence " + std::to_string(seq) + " needs " +
                std::to_string(rest) + " more bytes for " + what + " (" + mib(pool_.used()) +
                " in use) and no page can shrink further (reserve() first to stop it cleanly)");
  }
  pool_.charge_held(s.held);
  s.held = 0;
  pool_.charge(rest);
}

void KvAccountant::hold(KvSeqState& s, size_t bytes) {
  pool_.hold(bytes);
  s.held = bytes;
}

void KvAccountant::unhold(KvSeqState& s) {
  pool_.unhold(s.held);
  s.held = 0;
}

// ---- pages ----------------------------------------------------------------------------------------

int KvAccountant::block_floor(const KvPage& p, int block) const {
  return is_cold(p) && prefix_floor_bits_ > p.fin[block] ? prefix_floor_bits_ : p.fin[block];
}

int KvAccountant::shrink_top_bits(const KvPage& p) const {
  int top = 0;
  for (int b = 0; b < store_.n_blocks(); ++b)
    if (p.cur[b] > block_floor(p, b)) top = std::max(top, (int)p.cur[b]);
  return top;
}

// A page's next halving shrinks every block at the top bits above its floor (shrink_page). A cold
// page waits in the cold queue by its block's last use (PrefixIndex::cold_cost). Otherwise its
// cost: with calibrated shrink costs, the sensitivity it adds, sum of s(top / 2) - s(top) over
// those blocks, per byte it frees; without, -top (most bits first). Ties: oldest first (PagePool).
void KvAccountant::queue_next_shrink(const KvPage& p) {
  const int top = shrink_top_bits(p);
  if (top == 0) return pool_.forget(p.id);
  if (is_cold(p)) return pool_.set_shrinkable(p.id, PrefixIndex::cold_cost(*p.block), ShrinkQueue::cold);
  if (!shrink_by_cost_) return pool_.set_shrinkable(p.id, -(double)top);
  double added = 0;
  size_t freed = 0;
  for (int b = 0; b < store_.n_blocks(); ++b) {
    if (p.cur[b] != top || p.cur[b] <= p.fin[b]) continue;
    const KvComponent& c = store_.comp(p.layer, b);
    added += c.sensitivity_at[top / 2] - c.sensitivity_at[top];
    freed += store_.block_bytes(p.layer, b, top) - store_.block_bytes(p.layer, b, top / 2);
  }
  pool_.set_shrinkable(p.id, added / (double)std::max<size_t>(freed, 1));
}

void KvAccountant::shrink_page(KvPage& p, ShrinkPause& pause) {
  const int top = shrink_top_bits(p);
  MPKV_ASSERT(top > 0, "KV pool: shrinking a page that is at its final bits");
  std::vector<uint8_t> to_bits = p.cur;
  for (int b = 0; b < store_.n_blocks(); ++b) {
    if (p.cur[b] == top && p.cur[b] > block_floor(p, b)) {
      to_bits[b] = (uint8_t)(top / 2);
      totals_.halvings_from[top]++;
    }
  }
  const size_t freed = store_.rewrite_page(p, to_bits);
  pool_.release(freed);
  if (is_cold(p)) {
    cold_bytes_ -= freed;
    cold_halvings_++;
  } else {
    reclaimable_ -= freed;
  }
  queue_next_shrink(p);
  pause.pages++;
  pause.bytes_freed += freed;
  pause.from_bits = std::max(pause.from_bits, top);
  pause.to_bits = pause.to_bits == 0 ? top / 2 : std::min(pause.to_bits, top / 2);
}

void KvAccountant::shrink_page_to(KvPage& p, int bits) {
  MPKV_CHECK(p.full, "KV cache: only a full page can shrink");
  ShrinkPause pause;
  while (shrink_top_bits(p) > bits) shrink_page(p, pause);
}

void KvAccountant::page_filled(KvPage& p) {
  p.full = true;
  queue_next_shrink(p);
  reclaimable_ += p.bytes - store_.page_bytes_final(p);
}

void KvAccountant::unref_page(KvPage& p) {
  MPKV_ASSERT(p.refs > 0, "KV cache: page " + std::to_string(p.id) + " released more often than read");
  if (--p.refs != 0 || p.block != nullptr) return;
  if (p.full) reclaimable_ -= p.bytes - store_.page_bytes_final(p);
  destroy_page(p);
}

void KvAccountant::destroy_page(KvPage& p) {
  pool_.release(p.bytes + bytes_.page_metadata_bytes());
  pool_.forget(p.id);
  store_.destroy_page(p);
}

// ---- prefix blocks --------------------------------------------------------------------------------

size_t KvAccountant::block_pool_bytes(const PrefixBlock& b, bool at_final_bits) const {
  size_t sum = b.record_bytes;
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    const KvPage& p = store_.page(id);
    sum += (at_final_bits ? store_.page_bytes_final(p) : p.bytes) + bytes_.page_metadata_bytes();
  }
  return sum;
}

// The block's pages leave the running accounting (reclaimable, running queue) for the cold one.
void KvAccountant::block_went_cold(const PrefixBlock& b) {
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    const KvPage& p = store_.page(id);
    MPKV_ASSERT(p.refs == 0 && p.full, "KV cache: a cold cached page is still read or not full");
    reclaimable_ -= p.bytes - store_.page_bytes_final(p);
    queue_next_shrink(p);  // cold now: the cold queue, or none at the floor
  }
  cold_bytes_ += block_pool_bytes(b, false);
}

void KvAccountant::block_went_hot(const PrefixBlock& b) {
  cold_bytes_ -= block_pool_bytes(b, false);
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    const KvPage& p = store_.page(id);
    reclaimable_ += p.bytes - store_.page_bytes_final(p);
    queue_next_shrink(p);
  }
}

void KvAccountant::block_evicting(const PrefixBlock& b) { cold_bytes_ -= block_pool_bytes(b, false); }

// ---- consistency ----------------------------------------------------------------------------------

void KvAccountant::check_consistency(const PrefixIndex* prefix) const {
  std::unordered_map<uint64_t, int> reads;
  std::unordered_map<const PrefixBlock*, std::pair<int, int>> holds;  // (holders, readers) from the sequences
  size_t used = 0, reclaim = 0, cold = 0, pinned = 0;
  for (const auto& [seq, s] : store_.sequences()) {
    used += bytes_.sequence_fixed_bytes();
    for (size_t i = 0; i < s->blocks.size(); ++i) {
      holds[s->blocks[i]].first++;
      holds[s->blocks[i]].second += s->reads[i];
    }
    for (const KvLayerState& ls : s->layers)
      for (const KvPage* p : ls.pages) {
        MPKV_ASSERT(store_.has_page(p->id, p), "KV check: a read page was freed");
        reads[p->id]++;
      }
  }
  for (const auto& [id, p] : store_.pages()) {
    MPKV_ASSERT(p->refs == reads[id], "KV check: page " + std::to_string(id) + " refs " + std::to_string(p->refs) +
                                          ", read by " + std::to_string(reads[id]));
    MPKV_ASSERT(p->refs > 0 || p->block, "KV check: a page nobody holds was kept");
    used += p->bytes + bytes_.page_metadata_bytes();
    if (p->full && !is_cold(*p)) reclaim += p->bytes - store_.page_bytes_final(*p);
  }
  if (prefix) {
    prefix->for_each([&](const PrefixBlock& b) {
      const auto h = holds.count(&b) ? holds.at(&b) : std::pair<int, int>{0, 0};
      MPKV_ASSERT(b.holders == h.first && b.readers == h.second,
                  "KV check: block " + std::to_string(b.id) + " holders/readers " + std::to_string(b.holders) + "/" +
                      std::to_string(b.readers) + ", sequences hold it " + std::to_string(h.first) + "/" +
                      std::to_string(h.second));
      used += b.record_bytes;
      if (b.holders == 0) cold += block_pool_bytes(b, false);
      if (b.readers > 0) pinned += block_pool_bytes(b, true);
    });
  }
  MPKV_ASSERT(used == pool_.used(), "KV check: pool used " + std::to_string(pool_.used()) + ", records " +
                                        std::to_string(used));
  MPKV_ASSERT(reclaim == reclaimable_ && cold == cold_bytes_ && pinned == pinned_bytes_,
              "KV check: reclaimable/cold/pinned bytes drifted from the records");
  MPKV_ASSERT(pool_.budget() == 0 || pool_.used() + pool_.held() <= pool_.budget(), "KV check: over budget");
}

}  // namespace mpkv

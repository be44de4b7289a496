// Test-only inspection of PagedKvCache (src/kvcache/paged_kv_cache.h): a page's current and final
// bits, shrinking a chosen page as the budget would, and the accountant's consistency check. Only
// tests include this header; the cache grants it access (friend PagedKvCacheInspection).
#pragma once
#include "kvcache/paged_kv_cache.h"
#include "kvcache/prefix_cache.h"

namespace mpkv {

struct PagedKvCacheInspection {
  static const KvPage& page(const PagedKvCache& c, int seq, int layer, int page) {
    return *c.store_.seq(seq).layers.at(layer).pages.at(page);
  }
  static void shrink_page_to(PagedKvCache& c, int seq, int layer, int p, int bits) {
    c.acct_.shrink_page_to(const_cast<KvPage&>(page(c, seq, layer, p)), bits);
  }
  static void check_consistency(const PagedKvCache& c) {
    c.acct_.check_consistency(c.prefix_ ? &c.prefix_->index() : nullptr);
  }
};

// Block b = head * 2 + (K ? 0 : 1) of live page `page` of (seq, layer): its current and final bits.
inline int page_current_bits(const PagedKvCache& c, int seq, int layer, int page, int block) {
  return PagedKvCacheInspection::page(c, seq, layer, page).cur.at(block);
}
inline int page_final_bits(const PagedKvCache& c, int seq, int layer, int page, int block) {
  return PagedKvCacheInspection::page(c, seq, layer, page).fin.at(block);
}
// Shrinks live page `page` of (seq, layer) until no block is above `bits` (never below a block's
// final bits, or the prefix floor while the page is cold), as the budget would. Error unless full.
inline void shrink_page_to(PagedKvCache& c, int seq, int layer, int page, int bits) {
  PagedKvCacheInspection::shrink_page_to(c, seq, layer, page, bits);
}
// Recounts every pool byte, reference and queue entry from the records; InternalError on a mismatch.
inline void check_consistency(const PagedKvCache& c) { PagedKvCacheInspection::check_consistency(c); }

}  // namespace mpkv

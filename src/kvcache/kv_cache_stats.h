// What the paged KV cache reports of itself (paged_kv_cache.h): shrink pauses and totals, and the
// prefix cache's state. Plain data, so the engine, the CLI and /metrics (server/metrics.h) read the
// figures without including the cache and its kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>

namespace mpkv {

// One pause for shrinking: every page shrunk while making room for one reserve() or append().
struct ShrinkPause {
  int for_seq = 0;         // the sequence that needed the room
  int pages = 0;           // page shrinks performed (a page may be shrunk more than once)
  size_t bytes_freed = 0;
  double seconds = 0.0;
  int from_bits = 0, to_bits = 0;  // highest bits shrunk from, lowest shrunk to
};

struct ShrinkTotals {
  size_t pauses = 0, page_shrinks = 0, bytes_freed = 0;
  double seconds = 0.0, max_pause_seconds = 0.0;
  // Block halvings by the bits they started from: halvings_from[b] counts b -> b/2 (b = 16, 8, 4, 2).
  size_t halvings_from[17] = {};
};

// The prefix cache's state for reports and /metrics.
struct PrefixCacheStats {
  size_t blocks = 0, cold_blocks = 0;  // cached blocks; those no sequence holds
  size_t bytes = 0, cold_bytes = 0;    // their pool bytes (pages, page records, block records)
  uint64_t evictions = 0;              // blocks evicted
  uint64_t cold_halvings = 0;          // block halvings of cold cached pages
  std::map<int, size_t> pages_by_bits;  // cached pages by their highest current bits
};

// What one query's attention over a sequence reads, every layer (PagedKvCache::read_bytes): its
// live pages' blocks by their current bits (codes + scales + zeros, or fp16 rows for 16; of the
// open page, its filled share of the bytes at each width), and its fp16 sink and window rows (K
// and V).
struct KvReadBytes {
  std::map<int, size_t> pages_by_bits;
  size_t fp16_rows = 0;
};

}  // namespace mpkv

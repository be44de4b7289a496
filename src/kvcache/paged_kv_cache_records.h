// The records behind PagedKvCache (paged_kv_cache.h): pages, per-(sequence, layer) state and
// per-sequence state. Internal to src/kvcache: shared by the storage/budget code
// (paged_kv_cache.cpp) and attention (paged_kv_cache_attend.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kvcache/paged_kv_cache.h"

namespace mpkv {

struct PagedKvCache::Page {
  uint64_t id = 0;
  int seq = 0, layer = 0;
  uint8_t* data = nullptr;  // blocks b = 0 .. n_blocks-1 back to back, each at its current bits
  size_t bytes = 0;
  int filled = 0;  // rows written (a page is shrinkable only once full)
  bool full = false;
  int refs = 1;                    // sequences reading it (its writer, then prefix-cache readers)
  PrefixBlock* block = nullptr;    // the prefix-cache block holding it (null: not cached)
  std::vector<uint8_t> cur, fin;  // [n_blocks] current and final bits
};

struct PagedKvCache::LayerState {
  // [cap_rows, n_head_kv, head_dim] fp16 bits: rows [0, sink) the sink, rows [sink, sink + win_n)
  // the window (oldest first).
  std::vector<uint16_t> k16, v16;
  int n_tokens = 0, sink_n = 0, win_n = 0;
  // Tokens of the pages freed because they fell out of a sliding-window layer's window: the live
  // pages start at position sink_n + dropped (a multiple of page_tokens; 0 for global layers).
  int dropped = 0;
  std::vector<Page*> pages;  // owned by PagedKvCache::pages_by_id_ (shared pages: prefix cache)
};

struct PagedKvCache::SeqState {
  std::vector<LayerState> layers;
  size_t held = 0;  // bytes reserved for the next forward pass
  // Prefix cache: the chain of blocks it holds from the root: those it matched, then those its own
  // full pages became, or equal blocks another sequence had cached first (it then reads theirs and
  // frees its own copy). reads[i]: it reads blocks[i]'s pages without having written them.
  std::vector<PrefixBlock*> blocks;
  std::vector<uint8_t> reads;
  bool publish_stopped = false;  // a block could not be cached (no room, hash collision)
};

}  // namespace mpkv

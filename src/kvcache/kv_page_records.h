// The records of the paged KV cache (paged_kv_cache.h): pages, per-(sequence, layer) state,
// per-sequence state and per-component codecs. Plain data shared by the rooms of src/kvcache: the
// page store owns them (page_store.h), the accountant charges their bytes (kv_accountant.h), the
// prefix cache shares pages by id (prefix_cache.h) and the attention plan reads them
// (attention_plan.h). Their sizes are bounded by the byte model's record constants (kv_byte_model.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "quant/kv_block_layout.h"
#include "quant/kv_quantizer.h"

namespace mpkv {

struct PrefixBlock;
struct KeptSegmentLists;
// Frees a layer's kept segment lists (segment_lists.cpp, where their type is complete).
struct KeptSegmentListsDeleter {
  void operator()(KeptSegmentLists* p) const;
};

struct KvPage {
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

// The fp16 rows one multi-token append of a (sequence, layer) keeps for the queries of that append
// (docs/numerics.md, "Prefill chunks"): K and V of positions [pos0, pos0 + rows), pos0 the first
// window position before the append (at least the sink): the window as it was and every row the
// append put in the window, also those it then flushed into pages. A query at position p of the
// chunk reads [b(p), p] from here (b(p) = PageStore::fp16_from, where decoding token by token
// would have left its window) and only the codes below, whatever the chunk's length.
// Working memory of the forward pass that appends the tokens, not cache storage: an append of
// n > 1 tokens opens it with n + R + g - 1 rows at most (R the layer's window, g its flush
// granularity); the layer's next append (a 1-token one keeps none: decoding never copies), the
// sequence's next reserve and its removal free it. So it holds the fp16 K / V of one pass's
// tokens (plus a window per layer) between that pass and the next; not charged to the budget
// (kv_byte_model.h), like the activations of that pass.
struct KvStage {
  int pos0 = 0;
  int tokens = 0;                  // the append's token count: queries at most this many may read it
  std::vector<uint16_t> k16, v16;  // [rows, n_head_kv, head_dim] fp16 bits
};

struct KvLayerState {
  // [cap_rows, n_head_kv, head_dim] fp16 bits: rows [0, sink) the sink, rows [sink, sink + win_n)
  // the window (oldest first).
  std::vector<uint16_t> k16, v16;
  int n_tokens = 0, sink_n = 0, win_n = 0;
  // Tokens of the pages freed because they fell out of a sliding-window layer's window: the live
  // pages start at position sink_n + dropped (a multiple of page_tokens; 0 for global layers).
  int dropped = 0;
  std::vector<KvPage*> pages;  // owned by the page store (shared pages: prefix cache)
  std::unique_ptr<KvStage> stage;  // null: none (decoding; kept small for kLayerRecordBytes)
  // The attention plan's segment lists of this layer, kept from one attend to the next
  // (segment_lists.h): working memory of the attention, not cache storage (one 96-byte segment
  // per page and KV head, besides the window's), rebuilt whenever they no longer match the pages.
  // Mutable: attention reads the layer through a const PageStore.
  mutable std::unique_ptr<KeptSegmentLists, KeptSegmentListsDeleter> kept_segments;
};

struct KvSeqState {
  std::vector<KvLayerState> layers;
  size_t held = 0;  // bytes reserved for the next forward pass
  // Prefix cache: the chain of blocks it holds from the root: those it matched, then those its own
  // full pages became, or equal blocks another sequence had cached first (it then reads theirs and
  // frees its own copy). reads[i]: it reads blocks[i]'s pages without having written them.
  std::vector<PrefixBlock*> blocks;
  std::vector<uint8_t> reads;
  bool publish_stopped = false;  // a block could not be cached (no room, hash collision)
};

// Per (layer, head, role): how its blocks are written and read.
struct KvComponent {
  bool fp16 = false;
  std::unique_ptr<KvQuantizer> quant;  // at the initial bits (writes flushes; rotation for queries/outputs)
  KvBlockLayout layout_at[17];         // by bits, for the initial bits and every halving down to the final bits
  const float* centroids = nullptr;    // Lloyd-Max codebook (turbo)
  double sensitivity_at[17] = {};      // by bits: the plan's shrink costs (when it has them)
};

}  // namespace mpkv

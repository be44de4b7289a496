// Phase 1 of the attention plan (attention_plan.cpp): every row of each KV head of a (sequence,
// layer) as segments in position order -- the fp16 sink, the pages, the fp16 window -- with the
// segments of full pages kept from one call to the next, in the layer's state
// (KvLayerState::kept_segments).
//
// Why kept: rebuilding the lists every step and layer first-touched each page record (a separate
// heap object, two cache misses per page at long contexts) and rewrote every segment; that was
// ~7% of a 2-bit decode step's attention at 32K context, ~40% of it on the records' first touch
// (docs/results/speed.md 11g, 11i). A full page's segments depend only on its address, its data
// pointer and bits (unchanged while PageStore::epoch() holds), its row count (fixed once full)
// and its first position (the sink's rows, the dropped rows and the full pages before it). So a
// layer keeps the sink's and the leading full pages' segments while the store's epoch, the sink,
// the dropped rows, the fp16 buffers and the kept pages' addresses are those they were built from;
// each call then rebuilds only the open page, new pages and the window. The lists are the same
// segments a rebuild gives, so the outputs are the same bits.
//
// Kept with the layer, not with the caller's per-thread plan buffers: a thread that serves
// several caches (or a batch whose span order changes) would otherwise find another layer's lists
// in its buffers at every call and rebuild them all (measured: 11i).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/paged_attention.h"
#include "kvcache/page_store.h"

namespace mpkv {

struct SpanWork;

// One (sequence, layer)'s lists as the last attend left them.
struct KeptSegmentLists {
  uint64_t epoch = 0;
  bool valid = false;
  int sink_n = -1, dropped = -1;
  const uint16_t *k16 = nullptr, *v16 = nullptr;
  std::vector<const KvPage*> pages;            // the leading full pages whose segments are kept
  int kept_rows = 0;                           // their rows
  std::vector<size_t> kept;                    // per KV head: segments of the sink and those pages
  std::vector<std::vector<AttnSegment>> segs;  // per KV head: every row (SpanWork::list(h))
};

// fp16 rows [pos0, pos0 + n) (sink or window) as segments of at most kMaxKernelRows rows.
void add_fp16_rows(int pos0, int n, const uint16_t* k16, const uint16_t* v16, size_t stride,
                   std::vector<AttnSegment>& out);

// w's shared lists (SpanWork::list(h), h < n_head_kv): every row of each KV head of the layer, in
// position order, in ls.kept_segments.
void plan_segments(const PageStore& store, int layer, const KvLayerState& ls, SpanWork& w);

}  // namespace mpkv

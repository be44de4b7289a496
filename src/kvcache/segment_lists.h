// Phase 1 of the attention plan (attention_plan.cpp): every row of each KV head of a (sequence,
// layer) as segments in position order -- the fp16 sink, the pages, the fp16 window -- with the
// segments of full pages kept from one call to the next.
//
// Why kept: rebuilding the lists every step and layer first-touched each page record (a separate
// heap object, two cache misses per page at long contexts) and rewrote every segment; that was
// ~7% of a 2-bit decode step at 32K context, ~40% of it on the records' first touch
// (docs/results/speed.md 11g, 11i). A full page's segments depend only on its address, its data
// pointer and bits (unchanged while PageStore::epoch() holds), its row count (fixed once full)
// and its first position (the sink's rows, the dropped rows and the full pages before it). So a
// layer's lists keep the sink's and the leading full pages' segments while the store's epoch, the
// sink, the dropped rows, the fp16 buffers and the kept pages' addresses are those they were built
// from; each call then rebuilds only the open page, new pages and the window. The lists are the
// same segments a rebuild gives, so the outputs are the same bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/paged_attention.h"
#include "kvcache/page_store.h"

namespace mpkv {

struct SpanWork;

// One (sequence, layer)'s lists as the last call of its span left them.
struct KeptSegmentLists {
  const PageStore* store = nullptr;
  uint64_t epoch = 0;
  int seq = -1, sink_n = -1, dropped = -1;
  const uint16_t *k16 = nullptr, *v16 = nullptr;
  std::vector<const KvPage*> pages;            // the leading full pages whose segments are kept
  int kept_rows = 0;                           // their rows
  std::vector<size_t> kept;                    // per KV head: segments of the sink and those pages
  std::vector<std::vector<AttnSegment>> segs;  // per KV head (swapped into SpanWork::segs while planned)
};

// fp16 rows [pos0, pos0 + n) (sink or window) as segments of at most kMaxKernelRows rows.
void add_fp16_rows(int pos0, int n, const uint16_t* k16, const uint16_t* v16, size_t stride,
                   std::vector<AttnSegment>& out);

// w.segs[0, n_head_kv): every row of each KV head of (seq, layer), in position order.
void plan_segments(const PageStore& store, int layer, int seq, const KvLayerState& ls, SpanWork& w);

}  // namespace mpkv

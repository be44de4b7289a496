// Phase 1 of the attention plan with the full pages' segments kept across calls (segment_lists.h).
#include "kvcache/segment_lists.h"

#include <algorithm>
#include <utility>

#include "kvcache/paged_attend.h"

namespace mpkv {

void add_fp16_rows(int pos0, int n, const uint16_t* k16, const uint16_t* v16, size_t stride,
                   std::vector<AttnSegment>& out) {
  for (int i = 0; i < n; i += kMaxKernelRows) {
    AttnSegment& g = out.emplace_back();  // filled in place: see add_page_segments
    g.pos0 = pos0 + i;
    g.n = std::min(kMaxKernelRows, n - i);
    g.k16 = k16 + (size_t)i * stride;
    g.v16 = v16 + (size_t)i * stride;
    g.stride = stride;
  }
}

namespace {
// Page p of `layer` (first row at position pos), KV head h, as segments of at most kMaxKernelRows rows.
void add_page_segments(const PageStore& store, int layer, const KvPage& p, int h, int pos, std::vector<AttnSegment>& out) {
  const int d = store.dims().head_dim;
  const int bk = 2 * h, bv = 2 * h + 1;
  const KvComponent &ck = store.comp(layer, bk), &cv = store.comp(layer, bv);
  const uint8_t* kd = p.data + store.block_offset(p, bk);
  const uint8_t* vd = kd + store.block_bytes(layer, bk, p.cur[bk]);
  for (int i = 0; i < p.filled; i += kMaxKernelRows) {
    // Filled in place: a segment built on the stack and then copied in was read back as 16-byte
    // words right after its bools and ints were stored, and each such load waited for the stores
    // to retire (failed store forwarding: ~40% of plan_span's samples at 32K context in perf).
    AttnSegment& g = out.emplace_back();
    g.pos0 = pos + i;
    g.n = std::min(kMaxKernelRows, p.filled - i);
    g.t0 = i;
    g.stride = d;
    g.k_packed = !ck.fp16;
    g.v_packed = !cv.fp16;
    if (g.k_packed) g.k = {&ck.layout_at[p.cur[bk]], kd, ck.centroids};
    else g.k16 = reinterpret_cast<const uint16_t*>(kd) + (size_t)i * d;
    if (g.v_packed) g.v = {&cv.layout_at[p.cur[bv]], vd, cv.centroids};
    else g.v16 = reinterpret_cast<const uint16_t*>(vd) + (size_t)i * d;
  }
}

// Whether c's kept segments still describe the leading pages of ls (segment_lists.h).
bool still_valid(const KeptSegmentLists& c, const PageStore& store, const KvLayerState& ls) {
  if (!c.valid || c.epoch != store.epoch() || c.sink_n != ls.sink_n || c.dropped != ls.dropped ||
      c.k16 != ls.k16.data() || c.v16 != ls.v16.data() || c.pages.size() > ls.pages.size())
    return false;
  return std::equal(c.pages.begin(), c.pages.end(), ls.pages.begin());
}
}  // namespace

void KeptSegmentListsDeleter::operator()(KeptSegmentLists* p) const { delete p; }

void plan_segments(const PageStore& store, int layer, const KvLayerState& ls, SpanWork& w) {
  const KvDims& dims = store.dims();
  const int d = dims.head_dim, nkv = dims.n_head_kv;
  const size_t row = (size_t)nkv * d, win0 = (size_t)store.plan().sink * row;
  if (!ls.kept_segments) ls.kept_segments.reset(new KeptSegmentLists);
  KeptSegmentLists& c = *ls.kept_segments;
  const bool valid = still_valid(c, store, ls);
  c.valid = false;  // until every list below is complete (an exception leaves nothing to trust)
  if (!valid) {
    c.pages.clear();
    c.kept.assign(nkv, 0);
    c.kept_rows = 0;
    c.segs.resize(nkv);
    for (int h = 0; h < nkv; ++h) {
      c.segs[h].clear();  // keeps the list's capacity
      add_fp16_rows(0, ls.sink_n, ls.k16.data() + (size_t)h * d, ls.v16.data() + (size_t)h * d, row, c.segs[h]);
      c.kept[h] = c.segs[h].size();
    }
  }
  const auto& pages = ls.pages;
  const size_t first = c.pages.size();
  size_t n_full = first;  // pages [first, n_full) are full: kept from this call on
  while (n_full < pages.size() && pages[n_full]->filled == store.plan().page_tokens) ++n_full;
  for (int h = 0; h < nkv; ++h) {
    std::vector<AttnSegment>& list = c.segs[h];
    list.resize(c.kept[h]);  // drops the open page's and the window's segments of the last call
    int pos = ls.sink_n + ls.dropped + c.kept_rows;
    for (size_t i = first; i < pages.size(); ++i) {
      // Each page's record and its bit table are two dependent heap reads that miss the caches at
      // long contexts (the first call after a rebuild reads them all); asking for them a few
      // pages ahead overlaps those misses.
      if (i + 8 < pages.size()) __builtin_prefetch(pages[i + 8]);
      if (i + 4 < pages.size()) __builtin_prefetch(pages[i + 4]->cur.data());
      add_page_segments(store, layer, *pages[i], h, pos, list);
      pos += pages[i]->filled;
      if (i + 1 == n_full) c.kept[h] = list.size();
    }
    add_fp16_rows(pos, ls.win_n, ls.k16.data() + win0 + (size_t)h * d, ls.v16.data() + win0 + (size_t)h * d, row, list);
  }
  for (size_t i = first; i < n_full; ++i) {
    c.kept_rows += pages[i]->filled;
    c.pages.push_back(pages[i]);
  }
  c.epoch = store.epoch();
  c.sink_n = ls.sink_n;
  c.dropped = ls.dropped;
  c.k16 = ls.k16.data();
  c.v16 = ls.v16.data();
  c.valid = true;
  w.shared = &c.segs;
  w.n_shared = nkv;
}

}  // namespace mpkv

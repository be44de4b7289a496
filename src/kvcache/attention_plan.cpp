// The attention plan of a span (paged_attend.h): its segment lists over the sink, pages and window,
// its queries in model and code space (and int8), the per-token lists of a sliding-window layer and
// the work units. Every phase overwrites the SpanWork fields it fills (their capacity is kept).
#include <algorithm>
#include <cmath>

#include "kvcache/paged_attend.h"
#include "util/error.h"

namespace mpkv {

namespace {
// Cache rows one attention work unit covers; long contexts split into units of about this many
// rows so a single decoding token keeps every thread busy (partials merged afterwards). 256, not
// 1024: at 1K context a decode step of SmolLM2 (3 KV heads) had 3 large units, so 2 threads took
// 2/3 of the 1-thread time; at 256 it has 12-15 and the split is within ~1/12 of even
// (docs/results/speed.md, section 4c). The unit boundaries depend only on the span, never on threads.
constexpr int kChunkRows = 256;

// fp16 rows [pos0, pos0 + n) (sink or window) as segments of at most kMaxKernelRows rows.
void add_fp16_rows(int pos0, int n, const uint16_t* k16, const uint16_t* v16, size_t stride,
                   std::vector<AttnSegment>& out) {
  for (int i = 0; i < n; i += kMaxKernelRows) {
    AttnSegment g;
    g.pos0 = pos0 + i;
    g.n = std::min(kMaxKernelRows, n - i);
    g.k16 = k16 + (size_t)i * stride;
    g.v16 = v16 + (size_t)i * stride;
    g.stride = stride;
    out.push_back(g);
  }
}

// Page p of `layer` (first row at position pos), KV head h, as segments of at most kMaxKernelRows rows.
void add_page_segments(const PageStore& store, int layer, const KvPage& p, int h, int pos, std::vector<AttnSegment>& out) {
  const int d = store.dims().head_dim;
  const int bk = 2 * h, bv = 2 * h + 1;
  const KvComponent &ck = store.comp(layer, bk), &cv = store.comp(layer, bv);
  const uint8_t* kd = p.data + store.block_offset(p, bk);
  const uint8_t* vd = kd + store.block_bytes(layer, bk, p.cur[bk]);
  for (int i = 0; i < p.filled; i += kMaxKernelRows) {
    AttnSegment g;
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
    out.push_back(g);
  }
}

// The part of `full` (segments in position order) at positions [start, end): segments wholly
// before start are dropped and the one straddling it starts at it (its rows, fp16 pointers and
// packed-row offset t0 advanced alike), so a sliding-window query never reads an older row.
std::vector<AttnSegment> window_segments(const std::vector<AttnSegment>& full, int start, int end) {
  auto it = std::upper_bound(full.begin(), full.end(), start,
                             [](int p, const AttnSegment& g) { return p < g.pos0 + g.n; });
  std::vector<AttnSegment> out;
  for (; it != full.end() && it->pos0 < end; ++it) {
    AttnSegment g = *it;
    const int skip = std::max(0, start - g.pos0);
    g.pos0 += skip;
    g.n -= skip;
    g.t0 += skip;
    if (g.k16) g.k16 += (size_t)skip * g.stride;
    if (g.v16) g.v16 += (size_t)skip * g.stride;
    out.push_back(g);
  }
  return out;
}

// Phase 1: every row of each KV head in position order: sink, pages, window.
void plan_segments(const PageStore& store, int layer, const KvLayerState& ls, SpanWork& w) {
  const KvDims& dims = store.dims();
  const int d = dims.head_dim, nkv = dims.n_head_kv;
  const size_t row = (size_t)nkv * d, win0 = (size_t)store.plan().sink * row;
  w.segs.resize(nkv);
  for (auto& list : w.segs) list.clear();  // keeps each list's capacity
  for (int h = 0; h < nkv; ++h) {
    add_fp16_rows(0, ls.sink_n, ls.k16.data() + (size_t)h * d, ls.v16.data() + (size_t)h * d, row, w.segs[h]);
    int pos = ls.sink_n + ls.dropped;
    // Each page's record and its bit table are two dependent heap reads that miss the caches at
    // long contexts (perf at 32K: most of add_page_segments' time on the first load of a page);
    // asking for them a few pages ahead overlaps those misses.
    const auto& pages = ls.pages;
    for (size_t i = 0; i < pages.size(); ++i) {
      if (i + 8 < pages.size()) __builtin_prefetch(pages[i + 8]);
      if (i + 4 < pages.size()) __builtin_prefetch(pages[i + 4]->cur.data());
      add_page_segments(store, layer, *pages[i], h, pos, w.segs[h]);
      pos += pages[i]->filled;
    }
    add_fp16_rows(pos, ls.win_n, ls.k16.data() + win0 + (size_t)h * d, ls.v16.data() + win0 + (size_t)h * d, row,
                  w.segs[h]);
  }
}

// Phase 2: the queries per KV head, scaled, in model and code space, and their causal horizons.
void plan_queries(const PageStore& store, int layer, int cached, bool q8, SpanWork& w) {
  const KvDims& dims = store.dims();
  const int d = dims.head_dim, nkv = dims.n_head_kv, nh = dims.n_head, group = nh / nkv;
  const float scale = 1.0f / std::sqrt((float)d);
  const int n_tokens = w.n_tokens, nqt = n_tokens * group;
  w.qm.resize((size_t)nkv * nqt * d);
  w.qc.resize((size_t)nkv * nqt * d);
  w.visible.resize((size_t)nqt);
  for (int j = 0; j < nqt; ++j) w.visible[j] = cached - n_tokens + j / group + 1;
  for (int h = 0; h < nkv; ++h) {
    const KvQuantizer* kq = store.comp(layer, 2 * h).quant.get();
    for (int t = 0; t < n_tokens; ++t) {
      for (int g = 0; g < group; ++g) {
        const float* src = w.q + ((size_t)t * nh + (size_t)h * group + g) * d;
        float* dm = &w.qm[((size_t)h * nqt + (size_t)t * group + g) * d];
        float* dc = &w.qc[((size_t)h * nqt + (size_t)t * group + g) * d];
        for (int c = 0; c < d; ++c) dm[c] = dc[c] = src[c] * scale;
        if (kq && kq->rotates()) kq->to_code_space(dc);
      }
    }
  }
  w.q8.clear();
  if (!q8) return;
  w.q8_bytes.resize(nkv);
  w.q8_params.resize(nkv);
  for (int h = 0; h < nkv; ++h)
    w.q8.push_back(quantize_queries_q8(&w.qc[(size_t)h * nqt * d], d, nqt, d, w.q8_bytes[h], w.q8_params[h]));
}

// Phase 3: a sliding-window layer gives each query token its own segment lists, starting where its
// window does (the kernels mask only rows past a query's horizon, so a block of queries must share
// its first row: blocks of one token).
void plan_window_lists(int window, int nkv, int cached, SpanWork& w) {
  w.segs.resize((size_t)nkv * (1 + w.n_tokens));
  for (int t = 0; t < w.n_tokens; ++t) {
    const int pos = cached - w.n_tokens + t;
    for (int h = 0; h < nkv; ++h)
      w.segs[(size_t)nkv * (1 + t) + h] = window_segments(w.segs[h], window_start(window, pos), pos + 1);
  }
}

// Phase 4: units (block of query tokens, KV head, chunk of about kChunkRows rows) and their state.
void plan_units(int window, int nkv, int group, int d, SpanWork& w) {
  const int tokens_per_block = window > 0 ? 1 : std::max(1, kMaxQueriesPerCall / group);
  const size_t state_floats_per_query = 2 + 2 * (size_t)d;
  size_t state_total = 0;
  w.units.clear();
  for (int t0 = 0; t0 < w.n_tokens; t0 += tokens_per_block) {
    const int nt = std::min(tokens_per_block, w.n_tokens - t0);
    const int j0 = t0 * group, nq = nt * group;
    const int max_vis = w.visible[j0 + nq - 1];
    for (int h = 0; h < nkv; ++h) {
      const int first = (int)w.units.size();
      const int list = window > 0 ? nkv * (1 + t0) + h : h;
      size_t s0 = 0;
      const auto& sg = w.segs[list];
      while (s0 < sg.size() && sg[s0].pos0 < max_vis) {
        size_t s1 = s0;
        int rows = 0;
        while (s1 < sg.size() && sg[s1].pos0 < max_vis && rows < kChunkRows) rows += sg[s1++].n;
        w.units.push_back({h, list, j0, nq, s0, s1, state_total, first});
        state_total += nq * state_floats_per_query;
        s0 = s1;
      }
    }
  }
  w.state.resize(state_total);
}
}  // namespace

void plan_span(const PageStore& store, int layer, int seq, int n_tokens, const float* q, bool q8, SpanWork& w) {
  const KvLayerState& ls = store.seq(seq).layers[layer];
  MPKV_CHECK(n_tokens >= 1 && n_tokens <= ls.n_tokens, "KV attend: " + std::to_string(n_tokens) +
                                                           " queries but " + std::to_string(ls.n_tokens) + " cached tokens");
  const KvDims& dims = store.dims();
  w.q = q;
  w.n_tokens = n_tokens;
  plan_segments(store, layer, ls, w);
  plan_queries(store, layer, ls.n_tokens, q8, w);
  const int window = dims.window_of(layer);
  if (window > 0) plan_window_lists(window, dims.n_head_kv, ls.n_tokens, w);
  plan_units(window, dims.n_head_kv, dims.n_head / dims.n_head_kv, dims.head_dim, w);
}

}  // namespace mpkv

// The attention plan of a span (paged_attend.h): its segment lists over the sink, pages and window,
// its queries in model and code space (and int8), the per-token lists of a sliding-window layer and
// the work units. Every phase overwrites the SpanWork fields it fills (their capacity is kept).
#include <algorithm>
#include <climits>
#include <cmath>

#include "kvcache/paged_attend.h"
#include "kvcache/segment_lists.h"
#include "util/error.h"

namespace mpkv {

namespace {
// Cache rows one attention work unit covers; long contexts split into units of about this many
// rows so a single decoding token keeps every thread busy (partials merged afterwards). 256, not
// 1024: at 1K context a decode step of SmolLM2 (3 KV heads) had 3 large units, so 2 threads took
// 2/3 of the 1-thread time; at 256 it has 12-15 and the split is within ~1/12 of even
// (docs/results/speed.md, section 4c). The unit boundaries depend only on the span, never on threads.
constexpr int kChunkRows = 256;

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

// Phase 1 (every row of each KV head in position order): segment_lists.cpp.

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

// The end of the work unit that starts at segment s0 of sg: segments [s0, end) are taken, before
// `limit`, while they start before max_vis and the unit has fewer than kChunkRows rows. A unit
// that reached kChunkRows (*complete) ends where it does whatever follows it in the list.
size_t unit_end(const std::vector<AttnSegment>& sg, size_t s0, size_t limit, int max_vis, bool* complete) {
  size_t s1 = s0;
  int rows = 0;
  while (s1 < limit && sg[s1].pos0 < max_vis && rows < kChunkRows) rows += sg[s1++].n;
  *complete = rows >= kChunkRows;
  return s1;
}

// The ends of the complete units of list sg, cut from its start (ascending).
void complete_unit_ends(const std::vector<AttnSegment>& sg, std::vector<size_t>& ends) {
  ends.clear();
  bool complete = true;
  for (size_t s0 = 0; s0 < sg.size() && complete;) {
    const size_t s1 = unit_end(sg, s0, sg.size(), INT_MAX, &complete);
    if (complete) ends.push_back(s1);
    s0 = s1;
  }
}

// Index of the first segment of sg[0, n) that ends after position `pos` (n when none does).
size_t first_ending_after(const std::vector<AttnSegment>& sg, size_t n, int pos) {
  return (size_t)(std::upper_bound(sg.begin(), sg.begin() + n, pos,
                                   [](int p, const AttnSegment& g) { return p < g.pos0 + g.n; }) -
                  sg.begin());
}

// Phase 3: per-(token, head) lists, for a span of several queries or any query of a sliding-window
// layer. Query p reads exactly the list decoding token by token gives it (docs/numerics.md,
// "Prefill chunks"): the sink and page segments below b(p) (PageStore::fp16_from; the one
// straddling b(p) cut there), then its fp16 rows [b(p), p], cut every kMaxKernelRows from b(p)
// as the decoding step's window is, read from the append's stage (several queries: the append
// already flushed some of them) or from the window (one query: b(p) is the window's start); a
// sliding-window layer then keeps what its window sees. The fp16 rows end at the query itself, not
// at the chunk's end: a segment's row count and how segments pack into a kernel run can change a
// query's bits (paged_attention.cpp), so they must be the decoding step's.
// A global layer's per-token list would repeat the shared list's leading segments for every token
// (at 32K context, hundreds of pages each): the complete units wholly inside them are the
// decoding step's too (a unit's end depends only on the segments from its start) and are read
// from the shared list h up to w.prefix_end; w.segs[nkv * (1 + t) + h] holds the rest.
void plan_token_lists(const PageStore& store, int layer, const KvLayerState& ls, SpanWork& w) {
  const KvDims& dims = store.dims();
  const int d = dims.head_dim, nkv = dims.n_head_kv, window = dims.window_of(layer);
  const size_t row = (size_t)nkv * d;
  const int cached = ls.n_tokens, first_pos = cached - w.n_tokens;
  const uint16_t *k16 = ls.k16.data() + (size_t)store.plan().sink * row, *v16 = ls.v16.data() + (size_t)store.plan().sink * row;
  int base = cached - ls.win_n;  // position of the first fp16 row k16 / v16 point at
  if (w.n_tokens > 1) {
    const KvStage* st = ls.stage.get();
    // The stage's rows run from its pos0 (the window's start, never before the sink's end) to the
    // last cached position; an append that stayed inside the sink staged none.
    MPKV_ASSERT(st && st->tokens >= w.n_tokens, "KV attend: " + std::to_string(w.n_tokens) + " queries in layer " +
                                                     std::to_string(layer) + ", but the layer's last append kept the rows of " +
                                                     std::to_string(st ? st->tokens : 1) +
                                                     " (a paged cache attends at most the tokens of the layer's last append)");
    MPKV_ASSERT(st->pos0 + (int)(st->k16.size() / row) == std::max(cached, store.plan().sink),
                "KV attend: the stage of layer " + std::to_string(layer) + " holds rows from " + std::to_string(st->pos0) +
                    " to " + std::to_string(st->pos0 + (int)(st->k16.size() / row)) + ", not to position " +
                    std::to_string(cached));
    k16 = st->k16.data();
    v16 = st->v16.data();
    base = st->pos0;
  }
  w.segs.resize((size_t)nkv * (1 + w.n_tokens));  // [0, nkv) unused: the shared lists are the layer's (w.list)
  w.prefix_end.assign((size_t)nkv * w.n_tokens, 0);
  for (int h = 0; h < nkv; ++h) {
    const std::vector<AttnSegment>& shared = w.list(h);
    if (window == 0) complete_unit_ends(shared, w.unit_ends);
    for (int t = 0; t < w.n_tokens; ++t) {
      const int pos = first_pos + t;
      const int b = w.n_tokens > 1 ? store.fp16_from(layer, base, pos) : base;
      const size_t k = first_ending_after(shared, shared.size(), b);  // [0, k): wholly below b
      size_t from = 0;
      if (window > 0) {
        from = first_ending_after(shared, k, window_start(window, pos));
      } else {
        auto it = std::upper_bound(w.unit_ends.begin(), w.unit_ends.end(), k);
        from = it == w.unit_ends.begin() ? 0 : *(it - 1);
        w.prefix_end[(size_t)t * nkv + h] = from;
      }
      std::vector<AttnSegment>& list = w.segs[(size_t)nkv * (1 + t) + h];
      list.assign(shared.begin() + from, shared.begin() + k);
      if (k < shared.size() && shared[k].pos0 < b) {
        list.push_back(shared[k]);
        list.back().n = b - shared[k].pos0;
      }
      const size_t off = (size_t)(b - base) * row + (size_t)h * d;
      add_fp16_rows(b, pos + 1 - b, k16 + off, v16 + off, row, list);
      if (window > 0) list = window_segments(list, window_start(window, pos), pos + 1);
    }
  }
}

// Phase 4: units (block of query tokens, KV head, chunk of about kChunkRows rows) and their state.
// Per-token lists (phase 3) take blocks of one token: the shared list's units up to the token's
// prefix_end, then its own list's.
void plan_units(bool per_token, int nkv, int group, int d, SpanWork& w) {
  const int tokens_per_block = per_token ? 1 : std::max(1, kMaxQueriesPerCall / group);
  const size_t state_floats_per_query = 2 + 2 * (size_t)d;
  size_t state_total = 0;
  w.units.clear();
  // The units of segments [0, limit) of list `list` that start before max_vis.
  auto add_units = [&](int h, int list, size_t limit, int j0, int nq, int first, int max_vis) {
    bool complete = false;
    for (size_t s0 = 0; s0 < limit && w.list(list)[s0].pos0 < max_vis;) {
      const size_t s1 = unit_end(w.list(list), s0, limit, max_vis, &complete);
      w.units.push_back({h, list, j0, nq, s0, s1, state_total, first});
      state_total += nq * state_floats_per_query;
      s0 = s1;
    }
  };
  for (int t0 = 0; t0 < w.n_tokens; t0 += tokens_per_block) {
    const int nt = std::min(tokens_per_block, w.n_tokens - t0);
    const int j0 = t0 * group, nq = nt * group;
    const int max_vis = w.visible[j0 + nq - 1];
    for (int h = 0; h < nkv; ++h) {
      const int first = (int)w.units.size();
      if (per_token) {
        add_units(h, h, w.prefix_end[(size_t)t0 * nkv + h], j0, nq, first, max_vis);
        const int list = nkv * (1 + t0) + h;
        add_units(h, list, w.list(list).size(), j0, nq, first, max_vis);
      } else {
        add_units(h, h, w.list(h).size(), j0, nq, first, max_vis);
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
  // One query of a global layer (decoding) reads the shared lists as they stand; anything else
  // reads per-token lists (phase 3).
  const bool per_token = n_tokens > 1 || dims.window_of(layer) > 0;
  if (per_token) plan_token_lists(store, layer, ls, w);
  plan_units(per_token, dims.n_head_kv, dims.n_head / dims.n_head_kv, dims.head_dim, w);
}

}  // namespace mpkv

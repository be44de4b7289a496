// PagedKvCache attention (paged_kv_cache.h): every span of a layer's batch is cut into work units
// (block of query tokens x KV head x chunk of about kChunkRows cache rows), all units of all spans
// run as ONE thread-pool job (util/thread_pool.h, one unit per chunk), then each span's chunks are merged in position order.
//
// A span's units, their order and their merge order depend only on that span (its cached tokens
// and its queries), never on the other spans in the batch or on the thread count, so a sequence
// gets bitwise the same attention output alone or in any batch.
#include <algorithm>
#include <cmath>

#include "attention/paged_attention.h"
#include "kvcache/paged_kv_cache_records.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mpkv {

namespace {
// Cache rows one attention work unit covers; long contexts split into units of about this many
// rows so a single decoding token keeps every thread busy (partials merged afterwards). 256, not
// 1024: at 1K context a decode step of SmolLM2 (3 KV heads) had 3 large units, so 2 threads took
// 2/3 of the 1-thread time; at 256 it has 12-15 and the split is within ~1/12 of even
// (docs/results/speed.md, section 4c). The unit boundaries depend only on the span, never on threads.
constexpr int kChunkRows = 256;
// Queries one kernel call serves (query heads of a KV head x prefill tokens).
constexpr int kMaxQueriesPerCall = 16;

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
}  // namespace

// One unit: queries [j0, j0 + nq) of KV head h over segments [s0, s1) of segment list `list`; its
// softmax partial sits at `state` in the span's state buffer; `first` is the index of the first unit
// of its (query block, head), into which the others are merged.
struct PagedKvCache::AttendUnit {
  int h, list, j0, nq;
  size_t s0, s1, state;
  int first;
};

// One span's share of an attend_batch call.
struct PagedKvCache::SpanWork {
  const float* q = nullptr;  // [n_tokens, n_head, head_dim]
  float* out = nullptr;
  int n_tokens = 0;
  // Segment lists in position order: [0, n_head_kv) every row of a KV head (sink, pages, window);
  // in a sliding-window layer then one per (query token t, KV head h) at n_head_kv * (1 + t) + h,
  // only the rows that token sees.
  std::vector<std::vector<AttnSegment>> segs;
  // Queries per KV head, [n_head_kv][n_tokens * group][head_dim] (j = token * group + g), scaled by
  // 1/sqrt(head_dim), in model space (qm) and in the keys' code space (qc, rotated quantizers).
  std::vector<float> qm, qc;
  // The qc queries quantized to int8 (when q8_queries_), once per KV head for all of its units
  // (a unit takes the rows j0 .. j0 + nq of its head's: each query is quantized on its own).
  std::vector<Q8Queries> q8;
  std::vector<std::vector<int8_t>> q8_bytes;
  std::vector<std::vector<float>> q8_params;
  std::vector<int> visible;  // per query j: cache rows it sees (causal)
  std::vector<AttendUnit> units;
  std::vector<float> state;  // softmax partials: per unit nq * (2 + 2 * head_dim) floats
};

void PagedKvCache::attend(int seq, int layer, int n_tokens, const float* q, float* out) {
  attend_batch_impl(layer, {{seq, 0, n_tokens}}, q, out);
}

void PagedKvCache::attend_batch(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out) {
  attend_batch_impl(layer, spans, q, out);
}

void PagedKvCache::attend_batch_impl(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out) {
  const size_t row = (size_t)dims_.n_head * dims_.head_dim;
  // The plans are rebuilt every call into buffers this thread keeps (their capacity stays): fresh
  // vectors cost a page fault and a page clear per 4 KiB each call once a context's segment lists
  // pass malloc's mmap threshold (at 32K context: 8% of a 2-bit attend's time in perf,
  // docs/results/kv_cache.md section 1d). plan_span overwrites every field it reads.
  thread_local std::vector<SpanWork> work_buffers;
  thread_local std::vector<std::pair<uint32_t, uint32_t>> units_buffer;
  if (work_buffers.size() < spans.size()) work_buffers.resize(spans.size());
  SpanWork* work = work_buffers.data();
  // (span, unit) pairs of the whole batch.
  std::vector<std::pair<uint32_t, uint32_t>>& all_units = units_buffer;
  all_units.clear();
  for (size_t s = 0; s < spans.size(); ++s) {
    plan_span(layer, spans[s].seq, spans[s].n_tokens, q + spans[s].row0 * row, work[s]);
    work[s].out = out + spans[s].row0 * row;
    for (size_t u = 0; u < work[s].units.size(); ++u) all_units.push_back({(uint32_t)s, (uint32_t)u});
  }
  const int d = dims_.head_dim, group = dims_.n_head / dims_.n_head_kv;
  // One unit per chunk: units differ in length, so whoever is free takes the next one.
  parallel_for((int64_t)all_units.size(), 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;
    scratch.resize((size_t)std::max(kMaxQueriesPerCall, group) * kMaxKernelRows);
    for (int64_t i = i0; i < i1; ++i) {
      SpanWork& w = work[all_units[i].first];
      const AttendUnit& u = w.units[all_units[i].second];
      float* p = w.state.data() + u.state;
      const SoftmaxPartialView st{p, p + u.nq, p + 2 * u.nq};
      softmax_partial_clear(st, u.nq, d);
      const size_t nqt = (size_t)w.n_tokens * group;
      AttnQueries aq;
      aq.q_model = &w.qm[((size_t)u.h * nqt + u.j0) * d];
      aq.q_code = &w.qc[((size_t)u.h * nqt + u.j0) * d];
      aq.ldq = d;
      aq.nq = u.nq;
      aq.visible = &w.visible[u.j0];
      Q8Queries q8;
      if (q8_queries_) {
        q8 = q8_queries_rows(w.q8[u.h], u.j0, u.nq);
        aq.q8 = &q8;
      }
      if (i + 1 < i1) {  // the next unit's first segment (its later ones are prefetched as it runs)
        const SpanWork& wn = work[all_units[i + 1].first];
        const AttendUnit& un = wn.units[all_units[i + 1].second];
        prefetch_segment(wn.segs[un.list][un.s0]);
      }
      attend_segments(*kern_, d, aq, w.segs[u.list].data() + u.s0, u.s1 - u.s0, scratch.data(), st);
    }
  });
  for (size_t s = 0; s < spans.size(); ++s) finish_span(layer, work[s]);
}

void PagedKvCache::plan_span(int layer, int seq, int n_tokens, const float* q, SpanWork& w) const {
  const LayerState& ls = seq_state(seq).layers[layer];
  MPKV_CHECK(n_tokens >= 1 && n_tokens <= ls.n_tokens, "KV attend: " + std::to_string(n_tokens) +
                                                           " queries but " + std::to_string(ls.n_tokens) + " cached tokens");
  const int d = dims_.head_dim, nkv = dims_.n_head_kv, nh = dims_.n_head, group = nh / nkv;
  const size_t row = (size_t)nkv * d;
  const float scale = 1.0f / std::sqrt((float)d);
  const int L = ls.n_tokens;
  w.q = q;
  w.n_tokens = n_tokens;

  w.segs.resize(nkv);
  for (auto& list : w.segs) list.clear();  // keeps each list's capacity
  for (int h = 0; h < nkv; ++h) {
    auto add_rows = [&](int pos0, int n, const uint16_t* k16, const uint16_t* v16, size_t stride) {
      for (int i = 0; i < n; i += kMaxKernelRows) {
        AttnSegment g;
        g.pos0 = pos0 + i;
        g.n = std::min(kMaxKernelRows, n - i);
        g.k16 = k16 + (size_t)i * stride;
        g.v16 = v16 + (size_t)i * stride;
        g.stride = stride;
        w.segs[h].push_back(g);
      }
    };
    add_rows(0, ls.sink_n, ls.k16.data() + (size_t)h * d, ls.v16.data() + (size_t)h * d, row);
    int pos = ls.sink_n + ls.dropped;
    // Each page's record and its bit table are two dependent heap reads that miss the caches at
    // long contexts (perf at 32K: most of add_page_segments' time on the first load of a page);
    // asking for them a few pages ahead overlaps those misses.
    const auto& pages = ls.pages;
    for (size_t i = 0; i < pages.size(); ++i) {
      if (i + 8 < pages.size()) __builtin_prefetch(pages[i + 8]);
      if (i + 4 < pages.size()) __builtin_prefetch(pages[i + 4]->cur.data());
      add_page_segments(layer, *pages[i], h, pos, w.segs[h]);
      pos += pages[i]->filled;
    }
    add_rows(pos, ls.win_n, ls.k16.data() + (size_t)plan_.sink * row + (size_t)h * d,
             ls.v16.data() + (size_t)plan_.sink * row + (size_t)h * d, row);
  }

  const int nqt = n_tokens * group;
  w.qm.resize((size_t)nkv * nqt * d);
  w.qc.resize((size_t)nkv * nqt * d);
  w.visible.resize((size_t)nqt);
  for (int j = 0; j < nqt; ++j) w.visible[j] = L - n_tokens + j / group + 1;
  for (int h = 0; h < nkv; ++h) {
    const KvQuantizer* kq = comp(layer, 2 * h).quant.get();
    for (int t = 0; t < n_tokens; ++t) {
      for (int g = 0; g < group; ++g) {
        const float* src = q + ((size_t)t * nh + (size_t)h * group + g) * d;
        float* dm = &w.qm[((size_t)h * nqt + (size_t)t * group + g) * d];
        float* dc = &w.qc[((size_t)h * nqt + (size_t)t * group + g) * d];
        for (int c = 0; c < d; ++c) dm[c] = dc[c] = src[c] * scale;
        if (kq && kq->rotates()) kq->to_code_space(dc);
      }
    }
  }
  w.q8.clear();
  if (q8_queries_) {
    w.q8_bytes.resize(nkv);
    w.q8_params.resize(nkv);
    for (int h = 0; h < nkv; ++h)
      w.q8.push_back(quantize_queries_q8(&w.qc[(size_t)h * nqt * d], d, nqt, d, w.q8_bytes[h], w.q8_params[h]));
  }

  // A sliding-window layer gives each query token its own segment lists, starting where its window
  // does (the kernels mask only rows past a query's horizon, so a block of queries must share its
  // first row: blocks of one token).
  const int window = dims_.window_of(layer);
  if (window > 0) {
    w.segs.resize((size_t)nkv * (1 + n_tokens));
    for (int t = 0; t < n_tokens; ++t) {
      const int pos = L - n_tokens + t;
      for (int h = 0; h < nkv; ++h)
        w.segs[(size_t)nkv * (1 + t) + h] = window_segments(w.segs[h], window_start(window, pos), pos + 1);
    }
  }

  // Units: (block of query tokens, KV head, chunk of about kChunkRows rows).
  const int tokens_per_block = window > 0 ? 1 : std::max(1, kMaxQueriesPerCall / group);
  const size_t state_floats_per_query = 2 + 2 * (size_t)d;
  size_t state_total = 0;
  w.units.clear();
  for (int t0 = 0; t0 < n_tokens; t0 += tokens_per_block) {
    const int nt = std::min(tokens_per_block, n_tokens - t0);
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

void PagedKvCache::add_page_segments(int layer, const Page& p, int h, int pos, std::vector<AttnSegment>& out) const {
  const int d = dims_.head_dim;
  const int bk = 2 * h, bv = 2 * h + 1;
  const Component &ck = comp(layer, bk), &cv = comp(layer, bv);
  const uint8_t* kd = p.data + block_offset(p, bk);
  const uint8_t* vd = kd + block_bytes(layer, bk, p.cur[bk]);
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

// Merges the chunks of each (query block, head) into the first, normalises, un-rotates the packed
// values' part and writes out[token, h * group + g, :].
void PagedKvCache::finish_span(int layer, SpanWork& w) const {
  const int d = dims_.head_dim, nh = dims_.n_head, group = nh / dims_.n_head_kv;
  auto view = [&](const AttendUnit& u) {
    float* p = w.state.data() + u.state;
    return SoftmaxPartialView{p, p + u.nq, p + 2 * u.nq};
  };
  std::vector<float> code((size_t)d);
  for (size_t ui = 0; ui < w.units.size();) {
    const AttendUnit& u = w.units[ui];
    size_t end = ui + 1;
    while (end < w.units.size() && w.units[end].first == u.first) {
      softmax_partial_merge(view(u), view(w.units[end]), u.nq, 2 * d);
      ++end;
    }
    const SoftmaxPartialView st = view(u);
    const KvQuantizer* vq = comp(layer, 2 * u.h + 1).quant.get();
    for (int j = 0; j < u.nq; ++j) {
      const int jj = u.j0 + j, t = jj / group, g = jj % group;
      const float inv = 1.0f / st.l[j];
      const float* acc = st.acc + (size_t)j * 2 * d;
      for (int c = 0; c < d; ++c) code[c] = acc[d + c] * inv;
      if (vq && vq->rotates()) vq->from_code_space(code.data());
      float* o = w.out + ((size_t)t * nh + (size_t)u.h * group + g) * d;
      for (int c = 0; c < d; ++c) o[c] = acc[c] * inv + code[c];
    }
    ui = end;
  }
}

}  // namespace mpkv

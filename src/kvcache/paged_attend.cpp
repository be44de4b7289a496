// Running a layer's attention plans (paged_attend.h): all units of all spans as one thread-pool
// job, then each span's partials merged in position order.
#include <algorithm>
#include <utility>

#include "kvcache/paged_attend.h"
#include "util/thread_pool.h"

namespace mpkv {

namespace {
// Unit u of span w: its softmax partial cleared, then its segments attended.
void run_unit(const PagedAttentionKernels& kern, int d, int group, bool q8, SpanWork& w, const AttendUnit& u,
              float* scratch) {
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
  Q8Queries q8q;
  if (q8) {
    q8q = q8_queries_rows(w.q8[u.h], u.j0, u.nq);
    aq.q8 = &q8q;
  }
  attend_segments(kern, d, aq, w.list(u.list).data() + u.s0, u.s1 - u.s0, scratch, st);
}
}  // namespace

void attend_pages(const PageStore& store, const PagedAttentionKernels& kern, bool q8, int layer,
                  const std::vector<AttendSpan>& spans, const float* q, float* out) {
  const KvDims& dims = store.dims();
  const size_t row = (size_t)dims.n_head * dims.head_dim;
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
    plan_span(store, layer, spans[s].seq, spans[s].n_tokens, q + spans[s].row0 * row, q8, work[s]);
    work[s].out = out + spans[s].row0 * row;
    for (size_t u = 0; u < work[s].units.size(); ++u) all_units.push_back({(uint32_t)s, (uint32_t)u});
  }
  const int d = dims.head_dim, group = dims.n_head / dims.n_head_kv;
  // One unit per chunk: units differ in length, so whoever is free takes the next one.
  parallel_for((int64_t)all_units.size(), 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;
    scratch.resize((size_t)std::max(kMaxQueriesPerCall, group) * kMaxKernelRows);
    for (int64_t i = i0; i < i1; ++i) {
      SpanWork& w = work[all_units[i].first];
      if (i + 1 < i1) {  // the next unit's first segment (its later ones are prefetched as it runs)
        const SpanWork& wn = work[all_units[i + 1].first];
        const AttendUnit& un = wn.units[all_units[i + 1].second];
        prefetch_segment(wn.list(un.list)[un.s0]);
      }
      run_unit(kern, d, group, q8, w, w.units[all_units[i].second], scratch.data());
    }
  });
  for (size_t s = 0; s < spans.size(); ++s) finish_span(store, layer, work[s]);
}

void finish_span(const PageStore& store, int layer, SpanWork& w) {
  const KvDims& dims = store.dims();
  const int d = dims.head_dim, nh = dims.n_head, group = nh / dims.n_head_kv;
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
    const KvQuantizer* vq = store.comp(layer, 2 * u.h + 1).quant.get();
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

#include "attention/paged_attention.h"

#include <algorithm>
#include <cmath>

namespace mpkv {

void softmax_partial_clear(SoftmaxPartialView s, int nq, int head_dim) {
  for (int j = 0; j < nq; ++j) {
    s.m[j] = -INFINITY;
    s.l[j] = 0.0f;
  }
  std::fill(s.acc, s.acc + (size_t)nq * 2 * head_dim, 0.0f);
}

namespace {
// One line into the caches. GCC treats __builtin_prefetch as free of side effects and deletes a
// loop that does nothing else (-O3: the whole prefetch_bytes loop vanished), hence the asm.
inline void prefetch_line(const uint8_t* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*p));
#else
  __builtin_prefetch(p, 0, 3);
#endif
}

// Every 64-byte line of [p, p + bytes).
void prefetch_bytes(const uint8_t* p, size_t bytes) {
  if (bytes == 0) return;
  const uint8_t* end = p + bytes;
  for (const uint8_t* a = p; a < end; a += 64) prefetch_line(a);
  prefetch_line(end - 1);  // the last line, when p is not line-aligned
}

// Rows [t0, t0 + n) of one packed block: their codes and the scales / zeros they use.
void prefetch_rows(const PackedBlockView& b, int t0, int n) {
  const KvBlockLayout& L = *b.layout;
  prefetch_bytes(b.data + L.codes_offset + (size_t)t0 * L.row_bytes, (size_t)n * L.row_bytes);
  const size_t p0 = L.param_index(t0, 0), p1 = L.param_index(t0 + n - 1, L.head_dim - 1) + 1;
  prefetch_bytes(b.data + L.scales_offset + 2 * p0, 2 * (p1 - p0));
  if (L.n_zeros) prefetch_bytes(b.data + L.zeros_offset + 2 * p0, 2 * (p1 - p0));
}
}  // namespace

void prefetch_segment_keys(const AttnSegment& g) {
  if (g.n > 0 && g.k_packed) prefetch_rows(g.k, g.t0, g.n);
}

void prefetch_segment_values(const AttnSegment& g) {
  if (g.n > 0 && g.v_packed) prefetch_rows(g.v, g.t0, g.n);
}

void prefetch_segment(const AttnSegment& g) {
  prefetch_segment_keys(g);
  prefetch_segment_values(g);
}

namespace {
// Scores of segment g for every query, into s (row stride lds).
void score_segment(const PagedAttentionKernels& K, int d, const AttnQueries& q, const AttnSegment& g, float* s, size_t lds) {
  if (g.k_packed && q.q8 && q8_scores_apply(*g.k.layout)) {
    K.packed_scores_q8(g.k, *q.q8, g.t0, g.n, s, lds);
  } else if (g.k_packed) {
    K.packed_scores(g.k, q.q_code, q.ldq, q.nq, g.t0, g.n, s, lds);
  } else {
    K.f16_scores(g.k16, g.stride, d, q.q_model, q.ldq, q.nq, g.n, s, lds);
  }
}

// Values of segment g weighted by w (row stride lds) onto the state's accumulators.
void accumulate_segment(const PagedAttentionKernels& K, int d, const AttnQueries& q, const AttnSegment& g, const float* w,
                        size_t lds, SoftmaxPartialView st) {
  const size_t ldacc = 2 * (size_t)d;
  if (g.v_packed && q.q8 && q8_values_apply(*g.v.layout)) {
    K.packed_accumulate_q8(g.v, w, lds, q.nq, g.t0, g.n, st.acc + d, ldacc);
  } else if (g.v_packed) {
    K.packed_accumulate(g.v, w, lds, q.nq, g.t0, g.n, st.acc + d, ldacc);
  } else {
    K.f16_accumulate(g.v16, g.stride, d, w, lds, q.nq, g.n, st.acc, ldacc);
  }
}

// The online-softmax update of query j over `rows` scores s (the run's segments back to back, rows
// past the query's horizon already -inf); the scores become the weights.
void softmax_update(const PagedAttentionKernels& K, int j, float* s, int rows, size_t ldacc, SoftmaxPartialView st) {
  const float mrun = K.max_value(s, rows);
  if (mrun == -INFINITY) {
    std::fill(s, s + rows, 0.0f);
    return;
  }
  const float m = std::max(st.m[j], mrun);
  if (m > st.m[j]) {
    const float r = std::exp(st.m[j] - m);  // 0 when nothing was seen yet
    st.l[j] *= r;
    float* a = st.acc + j * ldacc;
    if (r == 0.0f) {
      std::fill(a, a + ldacc, 0.0f);
    } else {
      for (size_t c = 0; c < ldacc; ++c) a[c] *= r;
    }
    st.m[j] = m;
  }
  st.l[j] += K.exp_sum(s, rows, m);
}
}  // namespace

void attend_segments(const PagedAttentionKernels& K, int d, const AttnQueries& q, const AttnSegment* segs,
                     size_t n_segs, float* scratch, SoftmaxPartialView st) {
  const int nq = q.nq;
  const size_t lds = kMaxKernelRows, ldacc = 2 * (size_t)d;
  int max_visible = 0;
  for (int j = 0; j < nq; ++j) max_visible = std::max(max_visible, q.visible[j]);
  auto visible_at = [&](size_t k) { return k < n_segs && segs[k].pos0 < max_visible; };
  // Segments no query sees are skipped (for every query they would add exact zeros). A segment
  // some query sees is processed whole, rows past a query's horizon masked: the kernels' per-row
  // arithmetic may depend on the row count (8-row folds vs. a tail), so the count must not depend
  // on which other queries share the call (batch-invariant results; see paged_attention.h).
  // Consecutive segments are scored into one scratch row while they fit (kMaxKernelRows), and each
  // query's softmax state is updated once per such run (one max, one rescale, one exp pass): the
  // runs are cut by the segment sizes alone, and a run cut short at the last visible segment only
  // lacks rows every query of the call masks (exact zeros), so a query's arithmetic is the same
  // alone or with others (docs/numerics.md, Attention).
  for (size_t si = 0; visible_at(si);) {
    size_t se = si;
    int rows = 0;
    while (visible_at(se) && rows + segs[se].n <= kMaxKernelRows) rows += segs[se++].n;
    // Each segment's keys are prefetched while the segment two before it is scored, its values
    // while the one two before accumulates (the unit's first segment: by attend_pages, the second
    // here): bursts of about 20 lines (2-bit, 64 rows), not 40, which overran the core's line fill
    // buffers (perf showed the prefetch instructions waiting; kv_cache.md 1d). Two segments ahead,
    // not one: at 32K context one 64-row kernel call did not cover a burst's trip from DRAM, and
    // the kernels then waited on their first loads of scales and zeros (docs/results/speed.md 11g).
    if (si == 0 && visible_at(1)) prefetch_segment_keys(segs[1]);
    for (size_t k = si, off = 0; k < se; off += segs[k++].n) {
      if (visible_at(k + 2)) prefetch_segment_keys(segs[k + 2]);
      score_segment(K, d, q, segs[k], scratch + off, lds);
    }
    // Causal mask, then the online-softmax update of each query; weights replace the scores.
    for (int j = 0; j < nq; ++j) {
      float* s = scratch + j * lds;
      for (size_t k = si, off = 0; k < se; off += segs[k++].n) {
        const int seen = std::clamp(q.visible[j] - segs[k].pos0, 0, segs[k].n);
        std::fill(s + off + seen, s + off + segs[k].n, -INFINITY);
      }
      softmax_update(K, j, s, rows, ldacc, st);
    }
    if (visible_at(si + 1)) prefetch_segment_values(segs[si + 1]);
    for (size_t k = si, off = 0; k < se; off += segs[k++].n) {
      if (visible_at(k + 2)) prefetch_segment_values(segs[k + 2]);
      accumulate_segment(K, d, q, segs[k], scratch + off, lds, st);
    }
    si = se;
  }
}

}  // namespace mpkv

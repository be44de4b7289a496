// Where attention over pages is planned and run (paged_kv_cache.h; docs/design.md "KV cache rooms").
// Every span of a layer's batch is cut into work units (block of query tokens x KV head x chunk of
// about kChunkRows cache rows) over a read-only view of the page store; all units of all spans run
// as ONE thread-pool job (util/thread_pool.h, one unit per chunk), then each span's chunks are
// merged in position order (attention/paged_attention.h: softmax partials).
//
// A span's units, their order and their merge order depend only on that span (its cached tokens
// and its queries), never on the other spans in the batch or on the thread count, so a sequence
// gets bitwise the same attention output alone or in any batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/paged_attention.h"
#include "attention/paged_attention_kernels.h"
#include "kvcache/page_store.h"
#include "kvcache/segment_lists.h"
#include "model/kv_cache.h"

namespace mpkv {

// Queries one kernel call serves (query heads of a KV head x prefill tokens).
inline constexpr int kMaxQueriesPerCall = 16;

// One unit: queries [j0, j0 + nq) of KV head h over segments [s0, s1) of segment list `list`; its
// softmax partial sits at `state` in the span's state buffer; `first` is the index of the first unit
// of its (query block, head), into which the others are merged.
struct AttendUnit {
  int h, list, j0, nq;
  size_t s0, s1, state;
  int first;
};

// One span's share of an attend_batch call.
struct SpanWork {
  const float* q = nullptr;  // [n_tokens, n_head, head_dim]
  float* out = nullptr;
  int n_tokens = 0;
  // Segment lists in position order (list(i)): [0, n_head_kv) every row of a KV head (sink, pages,
  // window), the layer's own lists (KvLayerState::kept_segments, segment_lists.h); for several
  // queries or a sliding-window layer then one per (query token t, KV head h) at
  // n_head_kv * (1 + t) + h, in segs: the rows that token reads as decoding reads them
  // (attention_plan.cpp, phase 3), in a global layer only those after the shared list's first
  // prefix_end[t * n_head_kv + h] segments, which the token reads from list h.
  const std::vector<std::vector<AttnSegment>>* shared = nullptr;
  int n_shared = 0;
  std::vector<std::vector<AttnSegment>> segs;
  const std::vector<AttnSegment>& list(int i) const { return i < n_shared ? (*shared)[i] : segs[i]; }
  std::vector<size_t> prefix_end;
  std::vector<size_t> unit_ends;  // scratch of phase 3: one head's complete unit ends
  // Queries per KV head, [n_head_kv][n_tokens * group][head_dim] (j = token * group + g), scaled by
  // 1/sqrt(head_dim), in model space (qm) and in the keys' code space (qc, rotated quantizers).
  std::vector<float> qm, qc;
  // The qc queries quantized to int8 (when q8), once per KV head for all of its units (a unit takes
  // the rows j0 .. j0 + nq of its head's: each query is quantized on its own).
  std::vector<Q8Queries> q8;
  std::vector<std::vector<int8_t>> q8_bytes;
  std::vector<std::vector<float>> q8_params;
  std::vector<int> visible;  // per query j: cache rows it sees (causal)
  std::vector<AttendUnit> units;
  std::vector<float> state;  // softmax partials: per unit nq * (2 + 2 * head_dim) floats
};

// Plans span (seq, n_tokens queries at q) of `layer` into w, overwriting every field it reads
// (attention_plan.cpp). q8: quantize the queries for the int8 kernels.
void plan_span(const PageStore& store, int layer, int seq, int n_tokens, const float* q, bool q8, SpanWork& w);
// Merges the chunks of each (query block, head) into the first, normalises, un-rotates the packed
// values' part and writes w.out[token, h * group + g, :].
void finish_span(const PageStore& store, int layer, SpanWork& w);
// Every span of a layer's batch (paged_attend.cpp): q, out [rows, n_head, head_dim].
void attend_pages(const PageStore& store, const PagedAttentionKernels& kern, bool q8, int layer,
                  const std::vector<AttendSpan>& spans, const float* q, float* out);

}  // namespace mpkv

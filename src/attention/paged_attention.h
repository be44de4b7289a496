// Online-softmax attention of a few queries over a list of cache segments of one KV head: fp16
// rows (sink, window, fp16 pages) and packed pages at any bit-width, read in place by the
// kernels of paged_attention_kernels.h. A caller splits a long context into several lists (one
// per thread) and merges the partial states with softmax_partial_merge (attention_f16.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/attention_f16.h"
#include "attention/paged_attention_kernels.h"

namespace mpkv {

// A stretch of cache rows of one KV head: positions [pos0, pos0 + n), n <= kMaxKernelRows.
struct AttnSegment {
  int pos0 = 0;
  int n = 0;
  bool k_packed = false, v_packed = false;
  // fp16 rows (when not packed): row i of K at k16 + i * stride (uint16 fp16 bits), same for V.
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  size_t stride = 0;
  // packed: rows [t0, t0 + n) of a K block and / or a V block (their layouts may differ).
  PackedBlockView k, v;
  int t0 = 0;
};

// nq queries of one KV head, already multiplied by the softmax scale 1/sqrt(head_dim):
//   q_model [nq, head_dim] (row stride ldq) for fp16 segments, in model space;
//   q_code  [nq, head_dim] the same queries in the packed keys' code space (== q_model unless rotated).
// Query j sees cache positions < visible[j].
struct AttnQueries {
  const float* q_model = nullptr;
  const float* q_code = nullptr;
  size_t ldq = 0;
  int nq = 0;
  const int* visible = nullptr;
  // When set, packed key blocks that q8_scores_apply() are scored with these int8 queries
  // (quantized from q_code) instead of the float ones, and packed value blocks that
  // q8_values_apply() are accumulated with int8 weights (packed_accumulate_q8).
  const Q8Queries* q8 = nullptr;
};

// Quantizes nq queries [nq, d] (row stride ldq) by the Q8Queries rule; storage receives the int8
// values (nq * d), params the scales and sums (2 * nq). The result also points at q (Q8Queries::f),
// which must outlive it.
Q8Queries quantize_queries_q8(const float* q, size_t ldq, int nq, int d, std::vector<int8_t>& storage,
                              std::vector<float>& params);

// Queries [j0, j0 + nq) of `all` (the same int8 values, scales and sums: each query is quantized on
// its own, so quantizing a whole head's queries once serves every work unit of that head). Inline:
// returned from another file, the struct came back through memory written field by field and was
// read as 16-byte words, which waited on failed store forwarding once per work unit (~3% of a
// 2-bit decode step's attention at 32K context in perf, docs/results/speed.md 11g).
inline Q8Queries q8_queries_rows(const Q8Queries& all, int j0, int nq) {
  Q8Queries r = all;
  r.nq = nq;
  r.natural = all.natural + (size_t)j0 * all.d;
  r.scale = all.scale + j0;
  r.sum = all.sum + j0;
  r.f = all.f + (size_t)j0 * all.ldf;
  return r;
}

// Partial state of the queries over the segments: m[nq], l[nq] and acc[nq, 2 * head_dim], where
// acc[j][0, d) sums fp16 (model-space) values and acc[j][d, 2d) packed values in the V code space;
// the caller un-rotates the second half and adds it to the first after normalising. Segments must
// be in increasing position order. `scratch`: at least nq * kMaxKernelRows floats.
// Each query's state is bit for bit what it would be if that query were alone in the call: rows
// past its horizon get weight 0 (adding exact zeros) and every segment is processed at its full
// length, so neither nq nor the other queries' horizons change any query's arithmetic.
void attend_segments(const PagedAttentionKernels& kernels, int head_dim, const AttnQueries& q,
                     const AttnSegment* segments, size_t n_segments, float* scratch, SoftmaxPartialView state);

// Asks the CPU to start loading the packed bytes one segment reads (its rows' codes, scales and
// zeros of K and V; fp16 rows are left to the hardware prefetcher, which follows their fixed
// stride). Why: a page's blocks are small (a 64-row 2-bit block: 1 KiB of codes, 128 bytes each of
// scales and zeros) and scattered, so the hardware prefetcher, which needs a few misses to find
// a stream, gives up at every block edge; without this the q8 kernels spent about half of their
// time waiting on the first loads of each block (perf, docs/results/kv_cache.md section 1c).
void prefetch_segment(const AttnSegment& g);
// The same for the segment's packed keys only / packed values only.
void prefetch_segment_keys(const AttnSegment& g);
void prefetch_segment_values(const AttnSegment& g);

// Sets the state to "nothing seen": m = -inf, l = 0, acc = 0 (width 2 * head_dim).
void softmax_partial_clear(SoftmaxPartialView s, int nq, int head_dim);

}  // namespace mpkv

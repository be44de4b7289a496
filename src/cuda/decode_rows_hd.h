// The per-row part of the decode attention kernel (src/cuda/device/decode_attention.cu), shared with
// its host emulation (decode_host.h) so the CPU tests run the kernel's own indexing: which K/V rows a
// work item reads, where they are, and the online-softmax update of one query by one row.
#pragma once
#include <cstdint>

#include "cuda/kernel_args.h"
#include "cuda/kv_math_hd.h"

namespace mpkv::cuda {

// The K and V rows to read next: blocks, their layouts and the row inside them.
struct RowRef {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  DeviceBlockLayout lk, lv;
  int t = 0;
};

// One fp16 row [1][head_dim] (sink and window rows are read one row at a time).
MPKV_HD DeviceBlockLayout f16_row_layout(int head_dim) {
  DeviceBlockLayout f;
  f.format = BlockFormat::f16_rows;
  f.head_dim = head_dim;
  f.tokens = 1;
  return f;
}

// Rows of work item w: its fp16 rows (*nf of them; the first item of a sequence only) then its pages'
// rows (only the sequence's last page may be partly filled).
MPKV_HD int item_rows(const DecodeArgs& a, const WorkItem& w, int* nf) {
  *nf = w.with_f16 ? a.f16_rows[w.seq] : 0;
  const int np = w.page_end - w.page_begin;
  const bool has_last = w.page_end == a.page_indptr[w.seq + 1];
  return *nf + (np == 0 ? 0 : (np - 1) * a.page_tokens + (has_last ? a.last_page_len[w.seq] : a.page_tokens));
}

// Row i (< item_rows) of work item w for KV head h.
MPKV_HD RowRef row_ref(const DecodeArgs& a, const WorkItem& w, int h, int nf, int i, const DeviceBlockLayout& f16) {
  RowRef r;
  if (i < nf) {
    const size_t off = ((size_t)i * a.n_head_kv + h) * (size_t)a.head_dim * 2;
    r.k = a.arena + a.f16_k[w.seq] + off;
    r.v = a.arena + a.f16_v[w.seq] + off;
    r.lk = r.lv = f16;
    r.t = 0;
    return r;
  }
  const int j = i - nf, p = w.page_begin + j / a.page_tokens;
  r.t = j % a.page_tokens;
  const int slot = a.page_indices[p];
  const uint8_t* base = a.arena + a.slots.base[slot];
  const size_t sk = (size_t)slot * a.n_blocks + 2 * h;
  r.lk = a.layouts[(2 * h) * kBitsSlots + a.slots.bits[sk]];
  r.lv = a.layouts[(2 * h + 1) * kBitsSlots + a.slots.bits[sk + 1]];
  r.k = base + a.slots.block_off[sk];
  r.v = base + a.slots.block_off[sk + 1];
  return r;
}

// Online softmax of one query over one more row with score s and values x[0, n):
// m' = max(m, s), l' = l e^(m - m') + e^(s - m'), acc' = acc e^(m - m') + e^(s - m') x.
template <int MaxN>
MPKV_HD void softmax_row_update(float s, const float (&x)[MaxN], float& m, float& l, float (&acc)[MaxN]) {
  const float mn = m > s ? m : s;
  const float rescale = exp_f(m - mn);  // 0 for the first row (m = -inf)
  const float p = exp_f(s - mn);
  l = l * rescale + p;
  MPKV_UNROLL
  for (int k = 0; k < MaxN; ++k) acc[k] = acc[k] * rescale + p * x[k];
  m = mn;
}

}  // namespace mpkv::cuda

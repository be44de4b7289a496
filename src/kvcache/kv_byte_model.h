// Every byte of the paged KV cache (paged_kv_cache.h), counted in one place. A value type built
// from the model's dims and a plan, with no quantizer objects: the cache charges its pool with
// these figures, admission (engine/scheduler.h) and run budgets (run_budget.h) read its bounds,
// and calibration (calib/plan_allocation.h) prices candidate plans with them.
//
// Storage per (sequence, layer) (docs/algorithms.md §3):
//   sink    positions [0, S): fp16, kept forever (S = plan.sink)
//   pages   the body, P tokens each (P = plan.page_tokens); per page and per (KV head, K|V) one
//           block: fp16 rows, or codes + fp16 scales + fp16 zeros at its current bits
//   window  the most recent R..R+g-1 tokens at fp16 (R = plan.fp16_window(layer): the plan's
//           window or the layer's own, g = the layer's flush granularity: the KIVI key token
//           group, else 1)
//
// Accounting (allocator headers are not counted; every figure can be reproduced by hand):
//   sequence   sequence_fixed_bytes() = kSequenceRecordBytes + per layer (kLayerRecordBytes +
//              2 (K, V) x (S + R_layer + P) x n_head_kv x head_dim x 2 bytes of fp16 buffer)
//   page       its blocks' bytes at their current bits + page_metadata_bytes() =
//              kPageRecordBytes + 2 bytes per block (current, final bits)
//   prefix     a prefix-cache block record (prefix_index.h): prefix_block_record_bytes() =
//              kPrefixBlockRecordBytes + 4 bytes per token it covers + 8 per layer (page ids), and
//              for block 0 a copy of the sink rows (2 x S x n_head_kv x head_dim x 2 bytes per layer);
//              its pages are counted as pages
// A page is written at its blocks' initial bits (16 for a progressive plan, else the final bits)
// and may shrink toward the final bits only once full.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvcache/kv_plan.h"
#include "model/kv_cache.h"

namespace mpkv {

// Bookkeeping bytes counted per sequence, per (sequence, layer) and per page: upper bounds of the
// structs themselves plus their nodes in the sequence map, the id -> page map, the shrink queue
// (PagePool: a set node and a map node) and the page-table slot (static_assert'ed in
// paged_kv_cache.cpp).
inline constexpr size_t kSequenceRecordBytes = 256;
inline constexpr size_t kLayerRecordBytes = 128;
inline constexpr size_t kPageRecordBytes = 320;
inline constexpr size_t kPrefixBlockRecordBytes = 256;

// Where one layer of a sequence stands before an append (for append_bytes).
struct KvLayerFill {
  int n_tokens = 0;        // positions held
  int window_rows = 0;     // fp16 window rows not yet in pages
  int open_page_free = 0;  // free rows of the newest page when it is not full (0: none open)
};

class KvByteModel {
 public:
  // Error unless the plan is valid for these dims (validate(KvPlan, KvDims)).
  KvByteModel(const KvDims& dims, const KvPlan& plan);

  const KvDims& dims() const { return dims_; }
  int page_tokens() const { return P_; }
  int blocks_per_page() const { return n_blocks_; }  // n_head_kv x (K, V): block b = head * 2 + (K ? 0 : 1)
  int flush_granularity(int layer) const { return gran_[layer]; }
  int sink() const { return sink_; }
  int window(int layer) const { return window_[layer]; }  // the layer's fp16 window R
  // The sink + window buffer's capacity of `layer`: S + R + P rows.
  int fp16_rows(int layer) const { return sink_ + window_[layer] + P_; }

  // One block (b = head * 2 + (K ? 0 : 1)) of `layer`: its bits when written and when fully shrunk,
  // and its bytes at `bits` (a width on its ladder: initial bits down to final bits).
  bool is_fp16(int layer, int block) const { return at(layer, block).fp16; }
  int initial_bits(int layer, int block) const { return at(layer, block).init_bits; }
  int final_bits(int layer, int block) const { return at(layer, block).final_bits; }
  size_t block_bytes(int layer, int block, int bits) const;

  size_t sequence_fixed_bytes() const;
  size_t page_metadata_bytes() const { return kPageRecordBytes + 2 * (size_t)n_blocks_; }
  // Data bytes of one page of `layer` with every block at its initial or final bits.
  size_t page_data_bytes(int layer, bool at_final_bits) const;
  // Bytes a new page of `layer` charges: its data at initial bits and its metadata.
  size_t new_page_bytes(int layer) const { return page_data_bytes(layer, false) + page_metadata_bytes(); }

  // Tokens of a sequence of n positions that sit in pages (the rest are sink or window).
  int tokens_in_pages(int layer, int n) const;
  // Pages the next n tokens of a layer open (they go to the sink first, then the window, whose
  // oldest whole groups flush into the open page and new ones), and the bytes those pages charge.
  int pages_opened(int layer, const KvLayerFill& before, int n) const;
  size_t append_bytes(int layer, const KvLayerFill& before, int n) const {
    return (size_t)pages_opened(layer, before, n) * new_page_bytes(layer);
  }

  // Bytes one sequence needs to grow to n positions once its full pages are at their final bits:
  // the fixed buffers, and per layer every page but the newest at final bits plus the newest at
  // its initial bits (a page shrinks only once full). Admission: sequences whose bounds sum to at
  // most the budget all reach n, token by token or in chunks halved when their reservation does
  // not fit. A sliding-window layer counts at most window_pages_bound() pages, however large n
  // (docs/gemma3.md "Admission"). = overhead_bytes_bound + the sum of block_bytes_bound.
  size_t sequence_bytes_bound(int n) const;
  // Pages of `layer` a sequence of n positions holds at most at once: the pages it fills (the
  // newest possibly partly), capped by window_pages_bound for a sliding-window layer.
  size_t pages_bound(int layer, int n) const;
  // A sliding-window layer's live pages when tokens arrive one at a time: ceil((W - R + P - 1) / P)
  // (W its window), at least 1; SIZE_MAX for a global layer.
  size_t window_pages_bound(int layer) const;
  // What does not depend on bits: sequence_fixed_bytes() + page metadata of every page.
  size_t overhead_bytes_bound(int n) const;
  // One block of `layer` over those pages: every page but the newest at final bits, the newest at
  // initial bits.
  size_t block_bytes_bound(int layer, int block, int n) const;

  // Exactly what a sequence of n positions, appended token by token, holds: its fixed bytes and
  // its live pages (a sliding-window layer has freed those no later query reads), full pages at
  // their final bits when `full_pages_at_final_bits`, else at their initial bits; the open page at
  // its initial bits.
  size_t sequence_bytes(int n, bool full_pages_at_final_bits) const;
  // Live pages of `layer` in that sequence, and how many of them are full.
  int live_pages(int layer, int n, int* full = nullptr) const;

  // Prefix cache (prefix_index.h): the record of block `depth` (0: the one with the sink rows).
  size_t prefix_block_record_bytes(int depth) const;
  // What the first `matched_tokens` positions of a sequence that reads them from the prefix cache
  // take out of sequence_bytes_bound(): its global layers' pages over them, at final bits with
  // metadata (a sliding-window layer's bound is not lowered: its own pages replace the shared ones).
  size_t prefix_pages_bound(int matched_tokens) const;
  // The block records a sequence of n positions publishes at most (one per full page position).
  size_t prefix_records_bound(int n) const;

  // The smallest budget a cache can work with: one sequence with one page per layer at final bits.
  size_t min_budget_bytes() const;
  // Sequences of n positions a budget admits side by side (budget / sequence_bytes_bound(n)).
  size_t sequences_within(size_t budget_bytes, int n) const { return budget_bytes / sequence_bytes_bound(n); }

 private:
  struct Block {
    bool fp16 = false;
    int init_bits = 16, final_bits = 16;
    size_t bytes_at[17] = {};  // by bits on its ladder
  };
  const Block& at(int layer, int block) const { return blocks_[(size_t)layer * n_blocks_ + block]; }

  KvDims dims_;
  int P_, sink_, n_blocks_;
  std::vector<int> window_;    // per layer: the fp16 window R
  std::vector<int> gran_;      // per layer
  std::vector<Block> blocks_;  // [n_layer][n_blocks_]
};

}  // namespace mpkv

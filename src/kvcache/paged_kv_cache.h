// The mixed-precision paged KV cache (docs/algorithms.md §3): one byte budget shared by all
// sequences, pages quantized per (KV head, K|V) as the plan says, progressive shrinking under the
// budget, and attention that reads the packed pages in place.
//
// Per (sequence, layer):
//   sink    positions [0, S): fp16, kept forever (S = plan.sink)
//   pages   the body, P tokens each (P = plan.page_tokens); per page and per (KV head, K|V) one
//           block (fp16 rows, or a KvBlockLayout at its current bits) with its current and final bits
//   window  the most recent tokens at fp16: R..R+g-1 of them (R = plan.window, g = the layer's flush
//           granularity: the KIVI key token group, else 1). Whenever it holds R + g or more, its
//           oldest whole groups are quantized into the open page (or new pages), however many
//           tokens one append brings (chunked prefill).
// The fp16 sink + window buffer has a fixed capacity of S + R + P rows, allocated when the
// sequence is created.
//
// Memory accounting (PagePool; every figure counts these bytes exactly):
//   sequence   sequence_fixed_bytes() = kSequenceRecordBytes + per layer (kLayerRecordBytes +
//              2 (K, V) x (S + R + P) x n_head_kv x head_dim x 2 bytes of fp16 buffer)
//   page       its blocks' bytes (codes + fp16 scales + fp16 zeros, or fp16 rows) +
//              page_metadata_bytes() = kPageRecordBytes + 2 bytes per block (current, final bits)
// The record constants are fixed upper bounds of the bookkeeping structs (static_assert'ed in the
// .cpp) plus their nodes in the maps / queue / page table, so figures are reproducible by hand.
// Allocator headers are not counted. A shrink rewrites a page through a scratch buffer and
// reallocates it in place to the smaller size, so no second copy of the page is ever live.
//
// Budget: progressive plans create pages at 16-bit uniform codes; when a page (or a new
// sequence) would not fit, full pages are shrunk one halving at a time by the equivalent right
// shift, never below their final bits, cheapest halving first: with a calibrated plan (component
// sensitivities, kv_plan.h) the least sensitivity added per byte freed, otherwise most bits first;
// ties oldest first (PagePool; docs/calibration.md "Progressive runtime"). If
// even that cannot make room, reserve() returns false (the sequence stops with kv_budget and
// nothing changes); append() without a reservation throws Error. The pool never exceeds the budget.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "attention/paged_attention.h"
#include "attention/paged_attention_kernels.h"
#include "kvcache/kv_plan.h"
#include "kvcache/page_pool.h"
#include "model/kv_cache.h"
#include "quant/kv_quantizer.h"

namespace mpkv {

// One pause for shrinking: every page shrunk while making room for one reserve() or append().
struct ShrinkPause {
  int for_seq = 0;         // the sequence that needed the room
  int pages = 0;           // page shrinks performed (a page may be shrunk more than once)
  size_t bytes_freed = 0;
  double seconds = 0.0;
  int from_bits = 0, to_bits = 0;  // highest bits shrunk from, lowest shrunk to
};

struct ShrinkTotals {
  size_t pauses = 0, page_shrinks = 0, bytes_freed = 0;
  double seconds = 0.0, max_pause_seconds = 0.0;
  // Block halvings by the bits they started from: halvings_from[b] counts b -> b/2 (b = 16, 8, 4, 2).
  size_t halvings_from[17] = {};
};

// Bookkeeping bytes counted per sequence, per (sequence, layer) and per page (see above): the
// structs themselves plus their nodes in the sequence map, the id -> page map, the shrink queue
// (PagePool: a set node and a map node) and the page-table slot.
inline constexpr size_t kSequenceRecordBytes = 256;
inline constexpr size_t kLayerRecordBytes = 128;
inline constexpr size_t kPageRecordBytes = 320;

class PagedKvCache final : public KvCache {
 public:
  // Validates the plan against dims (Error); budget_bytes 0 = unlimited. `kernels` defaults to the
  // active ISA's table.
  PagedKvCache(KvDims dims, KvPlan plan, size_t budget_bytes,
               const PagedAttentionKernels& kernels = paged_attention_kernels());
  ~PagedKvCache() override;

  void append(int seq, int layer, int n_tokens, const float* k, const float* v) override;
  void attend(int seq, int layer, int n_tokens, const float* q, float* out) override;
  // All spans of a layer's batch in one parallel region (paged_kv_cache_attend.cpp); each span's
  // output is bitwise independent of the other spans and of the thread count.
  void attend_batch(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out) override;
  int length(int seq, int layer) const override;
  void remove(int seq) override;
  bool reserve(int seq, int n_tokens) override;
  std::string stats() const override;
  const std::vector<std::vector<float>>* key_smoothing() const override { return &plan_.smoothing; }

  const KvPlan& plan() const { return plan_; }
  const PagePool& pool() const { return pool_; }
  size_t bytes_used() const { return pool_.used(); }
  // Bytes that could be charged now if every full page shrank to its final bits (SIZE_MAX: no budget).
  size_t available_bytes() const {
    return pool_.budget() == 0 ? SIZE_MAX : pool_.free_bytes() + reclaimable_;
  }

  // The accounting formulas (see the header comment).
  size_t sequence_fixed_bytes() const;
  size_t page_metadata_bytes() const;
  // Data bytes of one page of `layer` with every block at its initial (16 when progressive) or
  // final bits.
  size_t page_data_bytes(int layer, bool at_final_bits) const;
  // Tokens of a sequence of n positions that sit in pages (the rest are sink or window).
  int tokens_in_pages(int layer, int n) const;
  // Bytes one sequence needs to grow to n positions once its full pages are at their final bits:
  // the fixed buffers, and per layer every page but the newest at final bits plus the newest at
  // its initial bits (a page is written at its initial bits and shrinks only once full). Admission
  // control: sequences whose bounds sum to at most the budget all reach n, token by token or in
  // chunks halved when their reservation does not fit (a chunk's reservation holds room for its new
  // 16-bit pages before the open page is full and shrinkable, so it may need more). It is the sum of the two
  // parts below, which calibration uses as its byte model (src/calib/plan_allocation.h).
  // A sliding-window layer counts at most window_pages_bound() pages, however large n: it frees
  // the pages no later query can read when the sequence reserves or appends its next positions
  // (a chunk of C tokens holds its window plus the chunk until then; docs/gemma3.md "Admission").
  size_t sequence_bytes_bound(int n) const;
  // Pages of `layer` a sequence of n positions holds at most at once: the pages it fills (the
  // newest possibly partly), capped by window_pages_bound for a sliding-window layer.
  size_t pages_bound(int layer, int n) const;
  // A sliding-window layer's live pages when tokens arrive one at a time: ceil((W - R + P - 1) / P)
  // (W its window, R = plan.window, P = plan.page_tokens), at least 1; SIZE_MAX for a global layer.
  size_t window_pages_bound(int layer) const;
  // What does not depend on bits: sequence_fixed_bytes() + page metadata of every page.
  size_t overhead_bytes_bound(int n) const;
  // One block (b = head * 2 + (K ? 0 : 1)) of `layer` over those pages: every page but the newest at
  // final bits, the newest at initial bits.
  size_t block_bytes_bound(int layer, int block, int n) const;

  // Blocks (one per page, KV head and K|V) by current bits: {bits -> count}; fp16 blocks count as 16.
  std::map<int, size_t> bits_histogram() const;
  const ShrinkTotals& shrink_totals() const { return shrink_totals_; }
  // The int8 kernels (paged_attention_kernels.h, default on): uniform / KIVI key pages of 2, 4, 8
  // and 16 bits scored with int8 queries, 2- and 4-bit value pages accumulated with int8 weights;
  // off: the float kernels everywhere (tests, comparisons).
  void set_q8_queries(bool on) { q8_queries_ = on; }
  void set_shrink_listener(std::function<void(const ShrinkPause&)> f) { on_pause_ = std::move(f); }

  // Inspection (tests): live pages of (seq, layer) (a sliding-window layer frees the pages that fell
  // out of its window: the live ones are the last), and a page's block b = head * 2 + (K ? 0 : 1).
  int n_pages(int seq, int layer) const;
  int page_current_bits(int seq, int layer, int page, int block) const;
  int page_final_bits(int seq, int layer, int page, int block) const;
  // The block's bytes and layout (quantized blocks only; Error for fp16 ones).
  const uint8_t* page_block(int seq, int layer, int page, int block, KvBlockLayout* layout) const;

 private:
  struct Page;
  struct LayerState;
  struct SeqState;
  struct AttendUnit;
  struct SpanWork;
  // Per (layer, head, role): how its blocks are written and read.
  struct Component {
    bool fp16 = false;
    int init_bits = 16, final_bits = 16;
    std::unique_ptr<KvQuantizer> quant;  // at init_bits (writes flushes; rotation for queries/outputs)
    KvBlockLayout layout_at[17];         // by bits, for init_bits and every halving down to final_bits
    const float* centroids = nullptr;    // Lloyd-Max codebook (turbo)
    double sensitivity_at[17] = {};      // by bits: the plan's shrink costs (when it has them)
  };

  const Component& comp(int layer, int block) const { return comps_[(size_t)layer * n_blocks_ + block]; }
  size_t block_bytes(int layer, int block, int bits) const;
  size_t block_offset(const Page& p, int block) const;
  size_t page_bytes_now(const Page& p) const;
  size_t page_bytes_final(const Page& p) const;

  SeqState& create_sequence(int seq);
  size_t bytes_needed(int seq, int n_tokens) const;
  // Shrinks pages until `bytes` more fit; false (nothing shrunk) when they cannot.
  bool make_room(size_t bytes, int for_seq);
  void shrink_page(Page& p, ShrinkPause& pause);
  // Highest current bits among the page's blocks above their final bits (0: none).
  int shrink_top_bits(const Page& p) const;
  // (Re)places the page in the pool's shrink queue with the cost of its next halving, or removes it.
  void queue_next_shrink(const Page& p);
  // Charges `bytes` to seq: from its reservation, else from free room (shrinking); Error if impossible.
  void charge(SeqState& s, int seq, size_t bytes, const char* what);
  Page& open_page(SeqState& s, int seq, int layer);
  void flush(SeqState& s, int seq, int layer, int k);
  void page_filled(Page& p);
  void free_page(Page& p);
  void drop_out_of_window(LayerState& ls, int layer, int first_query);
  const SeqState& seq_state(int seq) const;
  // Attention (paged_kv_cache_attend.cpp).
  void attend_batch_impl(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out);
  void plan_span(int layer, int seq, int n_tokens, const float* q, SpanWork& w) const;
  void add_page_segments(int layer, const Page& p, int h, int pos, std::vector<AttnSegment>& out) const;
  void finish_span(int layer, SpanWork& w) const;

  KvPlan plan_;
  const PagedAttentionKernels* kern_;
  PagePool pool_;
  int n_blocks_;            // n_head_kv * 2 per page
  int cap_rows_;            // fp16 buffer rows: sink + window + page_tokens
  std::vector<int> gran_;   // per layer: flush granularity
  std::vector<Component> comps_;  // [n_layer][n_blocks_]
  std::map<int, std::unique_ptr<SeqState>> seqs_;
  std::unordered_map<uint64_t, Page*> pages_by_id_;
  uint64_t next_page_id_ = 1;
  bool q8_queries_ = true;
  bool shrink_by_cost_ = false;  // progressive plan with component sensitivities
  size_t reclaimable_ = 0;  // bytes all full pages would free if shrunk to their final bits
  ShrinkTotals shrink_totals_;
  std::function<void(const ShrinkPause&)> on_pause_;
};

}  // namespace mpkv

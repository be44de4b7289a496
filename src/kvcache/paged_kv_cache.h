// The mixed-precision paged KV cache (docs/algorithms.md §3): one byte budget shared by all
// sequences, pages quantized per (KV head, K|V) as the plan says, progressive shrinking under the
// budget, and attention that reads the packed pages in place.
//
// Layout and memory accounting: kv_byte_model.h (the sink, the pages and the fp16 window of each
// (sequence, layer); every byte the pool is charged). The fp16 sink + window buffer has a fixed
// capacity of S + R + P rows, allocated when the sequence is created. Whenever the window holds
// R + g or more rows, its oldest whole groups are quantized into the open page (or new pages),
// however many tokens one append brings (chunked prefill). A shrink rewrites a page through a
// scratch buffer and reallocates it in place to the smaller size, so no second copy of the page
// is ever live.
//
// Budget (this file is where a page shrinks: make_room / shrink / shrink_page): progressive plans
// create pages at 16-bit uniform codes; when a page (or a new sequence) would not fit, full pages
// are shrunk one halving at a time by the equivalent right shift, never below their final bits,
// cheapest halving first: with a calibrated plan (component sensitivities, kv_plan.h) the least
// sensitivity added per byte freed, otherwise most bits first; ties oldest first (PagePool;
// docs/calibration.md "Progressive runtime"). If even that cannot make room, reserve() returns
// false and nothing changes (the caller decides: the engine's scheduler preempts, a one-sequence
// run stops); append() without a reservation throws Error. The pool never exceeds the budget.
//
// Prefix cache (docs/serving.md "Prefix cache"; paged_kv_cache_prefix.cpp, prefix_index.h): full
// pages are published under the hash of their tokens and everything before them; a new sequence
// reads matching pages (reference-counted, never written: a sequence only writes its open page) and
// a copy of the sink rows, and recomputes the rest (its fp16 window included). Pages only the cache
// holds are cold. Room is made in this order: cold pages shrink one halving at a time, coldest
// first, down to the prefix floor; then the coldest cold blocks are evicted (leaves first); then
// the pages sequences read shrink as above; then reserve() fails (the scheduler preempts).
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
#include "kvcache/kv_byte_model.h"
#include "kvcache/kv_memory.h"
#include "kvcache/kv_plan.h"
#include "kvcache/page_pool.h"
#include "kvcache/prefix_index.h"
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

// The prefix cache's state for reports and /metrics.
struct PrefixCacheStats {
  size_t blocks = 0, cold_blocks = 0;  // cached blocks; those no sequence holds
  size_t bytes = 0, cold_bytes = 0;    // their pool bytes (pages, page records, block records)
  uint64_t evictions = 0;              // blocks evicted
  uint64_t cold_halvings = 0;          // block halvings of cold cached pages
  std::map<int, size_t> pages_by_bits;  // cached pages by their highest current bits
};

class PagedKvCache final : public KvCache, public KvMemory {
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

  // KvMemory (kv_memory.h): what the engine's scheduler sees of the cache.
  const KvByteModel& byte_model() const override { return bytes_; }
  size_t budget_bytes() const override { return pool_.budget(); }
  size_t bytes_used() const override { return pool_.used(); }
  // Bytes that could be charged now if every full page sequences read shrank to its final bits
  // and every cold cached block were evicted (SIZE_MAX: no budget).
  size_t available_bytes() const override {
    return pool_.budget() == 0 ? SIZE_MAX : pool_.free_bytes() + reclaimable_ + cold_bytes_;
  }
  // Frees room in the order above until `bytes` are freed or nothing more can go; returns the bytes
  // freed. With no budget, nothing else shrinks pages.
  size_t shrink(size_t bytes) override;

  // Prefix cache (KvMemory; paged_kv_cache_prefix.cpp). enable: Error without a budget (nothing
  // would ever evict) or for a floor other than 0 (each page's final bits), 2, 4, 8 or 16.
  void enable_prefix_cache(int floor_bits);
  bool prefix_cache_enabled() const override { return prefix_ != nullptr; }
  PrefixMatch prefix_match(const int32_t* tokens, int n) const override;
  int attach_prefix(int seq, const int32_t* tokens, int n) override;
  void publish_prefix(int seq, const int32_t* tokens, int n) override;
  size_t prefix_pinned_bytes() const override { return pinned_bytes_; }
  PrefixCacheStats prefix_stats() const;

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
  // Tests: shrinks page `page` of (seq, layer) until no block is above `bits` (never below a
  // block's final bits), as the budget would.
  void shrink_page_to(int seq, int layer, int page, int bits);
  // Tests: recounts every pool byte, reference and queue entry from the records; InternalError on
  // a mismatch.
  void check_consistency() const;

 private:
  struct Page;
  struct LayerState;
  struct SeqState;
  struct AttendUnit;
  struct SpanWork;
  // Per (layer, head, role): how its blocks are written and read.
  struct Component {
    bool fp16 = false;
      std::unique_ptr<KvQuantizer> quant;  // at the initial bits (writes flushes; rotation for queries/outputs)
    KvBlockLayout layout_at[17];         // by bits, for the initial bits and every halving down to the final bits
    const float* centroids = nullptr;    // Lloyd-Max codebook (turbo)
    double sensitivity_at[17] = {};      // by bits: the plan's shrink costs (when it has them)
  };

  const Component& comp(int layer, int block) const { return comps_[(size_t)layer * n_blocks_ + block]; }
  size_t block_bytes(int layer, int block, int bits) const { return bytes_.block_bytes(layer, block, bits); }
  size_t block_offset(const Page& p, int block) const;
  size_t page_bytes_now(const Page& p) const;
  size_t page_bytes_final(const Page& p) const;

  SeqState& create_sequence(int seq);
  size_t bytes_needed(int seq, int n_tokens) const;
  // Shrinks pages until `bytes` more fit; false (nothing shrunk) when they cannot.
  bool make_room(size_t bytes, int for_seq);
  // One step of making room in the order above; false when nothing can go.
  bool free_one(ShrinkPause& pause);
  void shrink_page(Page& p, ShrinkPause& pause);
  // Highest current bits among the page's blocks above their floor (0: none); the floor is a
  // block's final bits, raised to the prefix floor while the page is cold.
  int shrink_top_bits(const Page& p) const;
  int block_floor(const Page& p, int block) const;
  bool is_cold(const Page& p) const;
  // (Re)places the page in the pool's shrink queue with the cost of its next halving, or removes it.
  void queue_next_shrink(const Page& p);
  // Charges `bytes` to seq: from its reservation, else from free room (shrinking); Error if impossible.
  void charge(SeqState& s, int seq, size_t bytes, const char* what);
  Page& open_page(SeqState& s, int seq, int layer);
  void flush(SeqState& s, int seq, int layer, int k);
  void page_filled(Page& p);
  // One sequence fewer reads p: freed when none does and the prefix cache does not hold it.
  void unref_page(Page& p);
  void free_page(Page& p);     // a page in the running accounting
  void destroy_page(Page& p);  // gives its bytes back and deletes it
  // Prefix cache internals (paged_kv_cache_prefix.cpp).
  std::vector<PrefixBlock*> match_chain(const int32_t* tokens, int n) const;
  bool chain_within_windows(const std::vector<PrefixBlock*>& chain) const;
  void hold_block(PrefixBlock& b, bool reader);
  void release_block(PrefixBlock& b, bool reader);
  void block_went_cold(PrefixBlock& b);
  void block_went_hot(PrefixBlock& b);
  void evict(PrefixBlock& b);
  size_t block_pool_bytes(const PrefixBlock& b, bool at_final_bits) const;
  void read_blocks(SeqState& s, const std::vector<PrefixBlock*>& chain);
  // Publishes block j of s (its pages full in every layer); false when it cannot (not full yet, no room).
  bool publish_block(SeqState& s, int seq, int j, const int32_t* tokens);
  // s's pages of block j (ids, one per layer) are a copy of cached block `same`: read those instead.
  bool adopt_block(SeqState& s, int j, const std::vector<uint64_t>& ids, PrefixBlock& same);
  void drop_out_of_window(LayerState& ls, int layer, int first_query);
  const SeqState& seq_state(int seq) const;
  // Attention (paged_kv_cache_attend.cpp).
  void attend_batch_impl(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out);
  void plan_span(int layer, int seq, int n_tokens, const float* q, SpanWork& w) const;
  void add_page_segments(int layer, const Page& p, int h, int pos, std::vector<AttnSegment>& out) const;
  void finish_span(int layer, SpanWork& w) const;

  KvPlan plan_;
  KvByteModel bytes_;
  const PagedAttentionKernels* kern_;
  PagePool pool_;
  int n_blocks_;            // n_head_kv * 2 per page
  std::vector<Component> comps_;  // [n_layer][n_blocks_]
  std::map<int, std::unique_ptr<SeqState>> seqs_;
  std::unordered_map<uint64_t, std::unique_ptr<Page>> pages_by_id_;  // owns every page
  uint64_t next_page_id_ = 1;
  bool q8_queries_ = true;
  bool shrink_by_cost_ = false;  // progressive plan with component sensitivities
  size_t reclaimable_ = 0;  // bytes all full pages would free if shrunk to their final bits
  ShrinkTotals shrink_totals_;
  std::function<void(const ShrinkPause&)> on_pause_;
  // Prefix cache (null: off).
  std::unique_ptr<PrefixIndex> prefix_;
  int prefix_floor_bits_ = 0;   // 0: each block's final bits
  size_t cold_bytes_ = 0;       // pool bytes of cold blocks (their pages and records)
  size_t pinned_bytes_ = 0;     // KvMemory::prefix_pinned_bytes
  uint64_t cold_halvings_ = 0;
};

}  // namespace mpkv

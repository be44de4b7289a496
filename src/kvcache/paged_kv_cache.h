// The mixed-precision paged KV cache (docs/algorithms.md §3): one byte budget shared by all
// sequences, pages quantized per (KV head, K|V) as the plan says, progressive shrinking under the
// budget, and attention that reads the packed pages in place.
//
// This class is a facade over the rooms of src/kvcache (docs/design.md "KV cache rooms"), each of
// which owns one thing:
//   page_store.h      where a page is stored: records, fp16 sink + window rows, pages by id, codecs
//   kv_accountant.h   where a byte is charged and where a page shrinks: the pool, running totals,
//                     make_room, the shrink queue, the consistency check
//   prefix_cache.h    where a prefix block is shared: the index, hold / release / publish / adopt / evict
//   paged_attend.h    where attention over pages is planned and run
// It sequences them: append fills the fp16 sink and window and flushes the window's oldest whole
// groups into the open page (or new pages), however many tokens one append brings (chunked
// prefill); reserve sets bytes aside for a forward pass and is called between passes only (a pass's
// own staged rows and window pages are freed by the next reservation, of any sequence that needs the
// room).
//
// Layout and memory accounting: kv_byte_model.h (the sink, the pages and the fp16 window of each
// (sequence, layer); every byte the pool is charged). If even shrinking cannot make room,
// reserve() returns false and nothing changes (the caller decides: the engine's scheduler
// preempts, a one-sequence run stops); append() without a reservation throws Error. The pool
// never exceeds the budget.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attention/paged_attention_kernels.h"
#include "kvcache/kv_accountant.h"
#include "kvcache/kv_byte_model.h"
#include "kvcache/kv_cache_stats.h"
#include "kvcache/kv_memory.h"
#include "kvcache/kv_plan.h"
#include "kvcache/page_pool.h"
#include "kvcache/page_store.h"
#include "model/kv_cache.h"

namespace mpkv {

class PrefixCache;

class PagedKvCache final : public KvCache, public KvMemory {
 public:
  // Validates the plan against dims (Error); budget_bytes 0 = unlimited. `kernels` defaults to the
  // active ISA's table.
  PagedKvCache(KvDims dims, KvPlan plan, size_t budget_bytes,
               const PagedAttentionKernels& kernels = paged_attention_kernels());
  ~PagedKvCache() override;

  void append(int seq, int layer, int n_tokens, const float* k, const float* v) override;
  void attend(int seq, int layer, int n_tokens, const float* q, float* out) override;
  // All spans of a layer's batch in one parallel region (paged_attend.h); each span's output is
  // bitwise independent of the other spans and of the thread count.
  void attend_batch(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out) override;
  int length(int seq, int layer) const override;
  std::string stats() const override;
  const std::vector<std::vector<float>>* key_smoothing() const override { return &plan_.smoothing; }

  const KvPlan& plan() const { return plan_; }
  const PagePool& pool() const { return acct_.pool(); }

  // KvMemory (kv_memory.h): what the engine's scheduler sees of the cache.
  const KvByteModel& byte_model() const override { return bytes_; }
  size_t budget_bytes() const override { return acct_.pool().budget(); }
  size_t bytes_used() const override { return acct_.pool().used(); }
  size_t available_bytes() const override { return acct_.available_bytes(); }
  bool reserve(int seq, int n_tokens) override;
  void remove(int seq) override;
  size_t shrink(size_t bytes) override { return acct_.shrink(bytes); }

  // Prefix cache (KvMemory; prefix_cache.h). enable: Error without a budget (nothing would ever
  // evict) or for a floor other than 0 (each page's final bits), 2, 4, 8 or 16.
  void enable_prefix_cache(int floor_bits);
  bool prefix_cache_enabled() const override { return prefix_ != nullptr; }
  PrefixMatch prefix_match(const int32_t* tokens, int n) const override;
  int attach_prefix(int seq, const int32_t* tokens, int n) override;
  void publish_prefix(int seq, const int32_t* tokens, int n) override;
  size_t prefix_pinned_bytes() const override { return acct_.pinned_bytes(); }
  PrefixCacheStats prefix_stats() const;

  // Blocks (one per page, KV head and K|V) by current bits: {bits -> count}; fp16 blocks count as 16.
  std::map<int, size_t> bits_histogram() const { return store_.bits_histogram(); }
  // Bytes one query's attention over seq reads, by width (kv_cache_stats.h): the roofline of
  // `mpkv bench` and of the engine's decode steps (engine/step_work.h).
  KvReadBytes read_bytes(int seq) const { return store_.read_bytes(seq); }
  const ShrinkTotals& shrink_totals() const { return acct_.shrink_totals(); }
  // The int8 kernels (paged_attention_kernels.h, default on): uniform / KIVI key pages of 2, 4, 8
  // and 16 bits scored with int8 queries, 2- and 4-bit value pages accumulated with int8 weights;
  // off: the float kernels everywhere (tests, comparisons).
  void set_q8_queries(bool on) { q8_queries_ = on; }
  void set_shrink_listener(std::function<void(const ShrinkPause&)> f) { acct_.set_shrink_listener(std::move(f)); }

  // Live pages of (seq, layer) (a sliding-window layer frees the pages that fell out of its window:
  // the live ones are the last), and the bytes and layout of a page's block b = head * 2 + (K ? 0 :
  // 1) (quantized blocks only; Error for fp16 ones): the byte benchmarks read pages through these.
  int n_pages(int seq, int layer) const;
  const uint8_t* page_block(int seq, int layer, int page, int block, KvBlockLayout* layout) const;

 private:
  friend struct PagedKvCacheInspection;  // tests only (tests/unit/test_kvcache_inspection.h)

  KvSeqState& new_sequence(int seq);  // its fixed bytes charged from free room (Error if none)
  KvPage& open_page(KvSeqState& s, int seq, int layer);
  // Moves the k oldest window rows of (seq, layer) into pages (k a multiple of the layer's granularity).
  void flush(KvSeqState& s, int seq, int layer, int k);
  // Between passes (reserve: no pass is in flight), what no later query of s reads: the fp16 rows
  // its last pass staged for its own queries, and in a sliding-window layer the pages behind the
  // window of its next position (what attention returns does not change).
  void drop_finished_rows(KvSeqState& s);
  // Frees the full pages no query at first_query or later reads (a sliding-window layer); called by
  // reserve() and at both ends of append() (at the end: pages this append filled).
  void drop_out_of_window(KvLayerState& ls, int layer, int first_query);

  KvPlan plan_;
  KvByteModel bytes_;
  const PagedAttentionKernels* kern_;
  PageStore store_;
  KvAccountant acct_;
  std::unique_ptr<PrefixCache> prefix_;  // null: off
  bool q8_queries_ = true;
};

}  // namespace mpkv

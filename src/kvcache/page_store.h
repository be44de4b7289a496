// Where a page of the paged KV cache is stored (paged_kv_cache.h; docs/design.md "KV cache rooms"):
// the sequences' fp16 sink + window rows, the pages by id, and each (layer, block)'s codec. It
// creates, fills, rewrites and destroys pages; it never charges a byte (kv_accountant.h does) and
// never decides what shrinks or is shared.
//
// A page holds the rows [pos, pos + filled) of one (sequence, layer): its blocks b = head * 2 +
// (K ? 0 : 1) back to back, each at its current bits (cur[b]) in the layout of its component at
// those bits (KvComponent::layout_at). The fp16 buffer of a (sequence, layer) has a fixed capacity
// of sink + window + page_tokens rows, the window being the layer's (kv_byte_model.h: fp16_rows).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kvcache/kv_byte_model.h"
#include "kvcache/kv_cache_stats.h"
#include "kvcache/kv_page_records.h"
#include "kvcache/kv_plan.h"
#include "model/kv_cache.h"

namespace mpkv {

class PageStore {
 public:
  // Builds every component's codec from the plan (validated by the caller).
  PageStore(const KvDims& dims, const KvPlan& plan, const KvByteModel& bytes);
  ~PageStore();
  PageStore(const PageStore&) = delete;
  PageStore& operator=(const PageStore&) = delete;

  const KvDims& dims() const { return dims_; }
  const KvPlan& plan() const { return plan_; }
  int n_blocks() const { return n_blocks_; }
  const KvComponent& comp(int layer, int block) const { return comps_[(size_t)layer * n_blocks_ + block]; }
  size_t block_bytes(int layer, int block, int bits) const { return bytes_.block_bytes(layer, block, bits); }
  size_t block_offset(const KvPage& p, int block) const;
  size_t page_bytes_now(const KvPage& p) const { return block_offset(p, n_blocks_); }
  size_t page_bytes_final(const KvPage& p) const;

  // Sequences. find: null when unknown; seq: InternalError when unknown.
  KvSeqState& create_sequence(int seq);
  KvSeqState* find(int seq);
  const KvSeqState* find(int seq) const;
  const KvSeqState& seq(int seq) const;
  void erase_sequence(int seq);
  const std::map<int, std::unique_ptr<KvSeqState>>& sequences() const { return seqs_; }

  // Pages. open_page: the layer's last page while it has room, else null. new_page allocates a
  // zeroed page at the initial bits and appends it to the layer (std::bad_alloc: nothing added).
  KvPage* open_page(KvLayerState& ls);
  KvPage& new_page(KvLayerState& ls, int seq, int layer);
  KvPage& page(uint64_t id) const { return *pages_by_id_.at(id); }
  bool has_page(uint64_t id, const KvPage* p) const;
  void destroy_page(KvPage& p);  // frees its data and its record
  const std::unordered_map<uint64_t, std::unique_ptr<KvPage>>& pages() const { return pages_by_id_; }

  // Rows. put_row writes token i of k/v ([n, n_head_kv * head_dim] fp32) at row r of the fp16
  // buffer; write_window_rows quantizes window rows [first, first + m) into the next m rows of p;
  // pop_window_rows removes the k oldest window rows.
  void put_row(KvLayerState& ls, int r, const float* k, const float* v, int i) const;
  void write_window_rows(const KvLayerState& ls, int first, int m, KvPage& p) const;
  void pop_window_rows(KvLayerState& ls, int k) const;
  // The stage of a multi-token append (kv_page_records.h: KvStage). open_stage replaces the layer's
  // stage by one holding its window rows as they are; stage_window_rows copies window rows
  // [sink + first, sink + first + m) after them (call it for the rows an append puts in the window,
  // before a flush pops them); drop_stage frees it.
  void open_stage(KvLayerState& ls, int tokens) const;
  void stage_window_rows(KvLayerState& ls, int first, int m) const;
  void drop_stage(KvLayerState& ls) const { ls.stage.reset(); }
  // The first position a query at `pos` reads as fp16 rows in `layer` (below it, pages' codes;
  // from it to pos, the window) when the tokens up to pos are appended one at a time from the
  // window start `base` (>= the sink): the window keeps R..R+g-1 rows, flushing its oldest g at a
  // time (kv_byte_model.h), so b = base + g * floor((pos + 1 - base - R) / g), never below base.
  // A position in the sink reads every row fp16: b = pos + 1.
  int fp16_from(int layer, int base, int pos) const;
  // How many of the layer's leading pages no query at first_query or later can read (a sliding-
  // window layer; 0 for global layers). Only full pages count; the open page is kept.
  size_t pages_before_window(const KvLayerState& ls, int layer, int first_query) const;

  // Rewrites p's blocks at the bits in to_bits (each equal to or one halving below its current
  // bits) and reallocates the page to its new size; returns the bytes freed.
  size_t rewrite_page(KvPage& p, const std::vector<uint8_t>& to_bits);

  // What one query's attention over seq reads, every layer (kv_cache_stats.h).
  KvReadBytes read_bytes(int seq) const;

  // Blocks (one per page, KV head and K|V) by current bits: {bits -> count}; fp16 blocks count as 16.
  std::map<int, size_t> bits_histogram() const;

  // Changes whenever a page's bytes move or its bits change (rewrite_page), a page record dies
  // (destroy_page) or a sequence is erased; never for appends (rows into the open page, new pages).
  // Values are unique across every PageStore of the process, so (epoch, a full page's address)
  // names the same page at the same bits for as long as the epoch holds: the attention plan keeps
  // the segments of full pages across calls on that basis (segment_lists.h).
  uint64_t epoch() const { return epoch_; }

 private:
  const KvDims& dims_;
  const KvPlan& plan_;
  const KvByteModel& bytes_;
  int n_blocks_;                     // n_head_kv * 2 per page
  std::vector<KvComponent> comps_;   // [n_layer][n_blocks_]
  std::map<int, std::unique_ptr<KvSeqState>> seqs_;
  std::unordered_map<uint64_t, std::unique_ptr<KvPage>> pages_by_id_;  // owns every page
  uint64_t next_page_id_ = 1;
  uint64_t epoch_;
  void bump_epoch();
};

}  // namespace mpkv

// Where a prefix block is shared (paged_kv_cache.h; docs/serving.md "Prefix cache"; docs/design.md
// "KV cache rooms"): full pages are published under the hash of their tokens and everything before
// them (the index: prefix_index.h); a new sequence reads matching pages (reference-counted, never
// written: a sequence only writes its open page) and a copy of the sink rows, and recomputes the
// rest (its fp16 window included). Blocks no sequence holds are cold: their pages shrink first, to
// the prefix floor, then the coldest blocks are evicted (kv_accountant.h, free_one).
//
// It talks to the page store by page id and to the accountant for every byte and running total.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvcache/kv_accountant.h"
#include "kvcache/kv_cache_stats.h"
#include "kvcache/kv_memory.h"
#include "kvcache/kv_plan.h"
#include "kvcache/page_store.h"
#include "kvcache/prefix_index.h"

namespace mpkv {

class PrefixCache {
 public:
  // format_hash: the format every cached page is written in (a page is never shared across formats).
  PrefixCache(const KvDims& dims, const KvPlan& plan, const KvByteModel& bytes, PageStore& store, KvAccountant& acct,
              uint64_t format_hash);

  const PrefixIndex& index() const { return index_; }
  // KvMemory::prefix_match / attach_prefix / publish_prefix (kv_memory.h).
  PrefixMatch match(const int32_t* tokens, int n) const;
  int attach(int seq, const int32_t* tokens, int n);
  void publish(int seq, const int32_t* tokens, int n);
  // Releases every block s holds (its removal).
  void release_all(KvSeqState& s);
  // Evicts the coldest evictable block; returns the bytes freed (0: none).
  size_t evict_coldest();
  PrefixCacheStats stats() const;

 private:
  std::vector<PrefixBlock*> match_chain(const int32_t* tokens, int n) const;
  bool chain_within_windows(const std::vector<PrefixBlock*>& chain) const;
  void read_blocks(KvSeqState& s, const std::vector<PrefixBlock*>& chain);
  // Publishes block j of s (its pages full in every layer); false when it cannot (not full yet, no room).
  bool publish_block(KvSeqState& s, int seq, int j, const int32_t* tokens);
  void copy_sink_rows(const KvSeqState& s, PrefixBlock& b) const;
  // s's pages of block j (ids, one per layer) are a copy of cached block `same`: read those instead.
  bool adopt_block(KvSeqState& s, int j, const std::vector<uint64_t>& ids, PrefixBlock& same);
  void hold_block(PrefixBlock& b, bool reader);
  void release_block(PrefixBlock& b, bool reader);
  void evict(PrefixBlock& b);

  const KvDims& dims_;
  const KvPlan& plan_;
  const KvByteModel& bytes_;
  PageStore& store_;
  KvAccountant& acct_;
  PrefixIndex index_;
};

}  // namespace mpkv

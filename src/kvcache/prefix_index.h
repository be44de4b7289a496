// The prefix cache's index (docs/serving.md "Prefix cache"): which full pages hold the KV of which
// token prefix, who holds them, and which are cold. Bookkeeping, no page data (block 0 keeps a
// copy of the sink rows): the page store owns the pages, the accountant the budget
// (kv_accountant.h), and the prefix cache (prefix_cache.h) asks this index what matches, what is
// cold and what goes next.
//
// A block is one page position of every layer: block 0 covers tokens [0, S + P) (the sink rows and
// the first page; S = plan.sink, P = plan.page_tokens), block j > 0 tokens [S + jP, S + (j+1)P).
// A block is identified by the hash of its tokens chained to its parent's hash, which starts from
// a hash of the cache's format (method, plan), so a page is never shared across formats; a hash
// hit is confirmed by comparing the parent and the tokens, so a collision is a miss, never a wrong
// page. Blocks form a tree (children share their parent's prefix).
//
// Holders are sequences: every sequence holds a chain of blocks from the root (the blocks it
// matched, whose pages it reads, then the blocks its own pages became). A block no sequence holds
// is cold; every descendant of a cold block is cold too (a holder of a block holds its ancestors).
// Cold leaves can be evicted, coldest first (least recently used; deeper first among equals, so a
// chain is evicted from its tail, as vLLM and SGLang do).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace mpkv {

struct PrefixBlock {
  uint64_t id = 0;  // creation order (ties in the eviction order)
  uint64_t hash = 0;
  PrefixBlock* parent = nullptr;
  int depth = 0;                    // block index j
  std::vector<int32_t> tokens;      // the tokens it covers (S + P for block 0, else P)
  std::vector<uint64_t> page_ids;   // [n_layer] page of each layer; 0: a sliding-window layer's page
                                    // that had already left its window when the block was cached
  std::vector<uint16_t> sink_k, sink_v;  // block 0: the sink rows, [n_layer][S][n_head_kv * head_dim] fp16
  size_t record_bytes = 0;          // charged to the KV pool for this record (kv_byte_model.h)
  int holders = 0;                  // sequences holding it
  int readers = 0;                  // holders that attend over its pages (they matched it)
  int children = 0;                 // cached blocks whose parent it is
  uint64_t last_used = 0;           // tick of its last match or insertion
};

class PrefixIndex {
 public:
  explicit PrefixIndex(uint64_t format_hash) : format_hash_(format_hash) {}

  // The block after `parent` (null: the root) covering exactly these tokens; null when absent.
  PrefixBlock* find(const PrefixBlock* parent, const int32_t* tokens, int n) const;
  // Adds a block after `parent` with one holder; null (nothing added) when its hash is taken by a
  // different prefix (a collision) or it is already there.
  PrefixBlock* insert(PrefixBlock* parent, const int32_t* tokens, int n, std::vector<uint64_t> page_ids,
                      size_t record_bytes);
  // One more holder (a reader attends over its pages); marks it used now. True when it was cold.
  bool hold(PrefixBlock* b, bool reader);
  // One holder fewer; true when the block became cold.
  bool release(PrefixBlock* b, bool reader);
  // The coldest evictable block (cold, no cached children); null when none.
  PrefixBlock* next_to_evict() const;
  // Removes an evictable block (InternalError otherwise).
  void erase(PrefixBlock* b);

  // Order key of a cold block's pages in the cold shrink queue (page_pool.h): coldest first,
  // deeper first among blocks last used at the same tick. Exact in a double below 2^41 ticks.
  static double cold_cost(const PrefixBlock& b);

  uint64_t evictions() const { return evictions_; }
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [h, b] : blocks_) f(*b);
  }

 private:
  uint64_t chain(const PrefixBlock* parent, const int32_t* tokens, int n) const;
  void update_evictable(PrefixBlock* b);
  using EvictKey = std::tuple<uint64_t, int, uint64_t>;  // (last_used, -depth, id)
  static EvictKey evict_key(const PrefixBlock& b) { return {b.last_used, -b.depth, b.id}; }

  uint64_t format_hash_;
  uint64_t tick_ = 0, next_id_ = 1, evictions_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<PrefixBlock>> blocks_;  // by hash
  std::set<EvictKey> evictable_;
  std::unordered_map<uint64_t, PrefixBlock*> by_id_;
};

}  // namespace mpkv

// PagedKvCache's prefix cache (paged_kv_cache.h; docs/serving.md "Prefix cache"): matching a new
// sequence's tokens against cached blocks, publishing a sequence's full pages, the hot/cold
// accounting of cached pages and eviction. The index itself is prefix_index.h.
//
// Accounting invariants (check_consistency recounts them):
//   reclaimable_  = sum over full pages that are not cold of (bytes - bytes at final bits)
//   cold_bytes_   = sum over cold blocks of their pages' bytes + page records + the block record
//   pinned_bytes_ = sum over blocks with readers of the same at final bits
// A page is cold when its block is (no sequence holds the block); a cold page waits in the pool's
// cold queue until it reaches the prefix floor.
#include <algorithm>
#include <cstring>
#include <functional>

#include "kvcache/paged_kv_cache.h"
#include "kvcache/paged_kv_cache_records.h"
#include "util/error.h"

namespace mpkv {

void PagedKvCache::enable_prefix_cache(int floor_bits) {
  MPKV_CHECK(pool_.budget() > 0, "the prefix cache needs a KV budget (nothing would ever evict its pages)");
  MPKV_CHECK(floor_bits == 0 || floor_bits == 2 || floor_bits == 4 || floor_bits == 8 || floor_bits == 16,
             "--prefix-cache-floor-bits must be 2, 4, 8 or 16 (0: each page's final bits), got " +
                 std::to_string(floor_bits));
  MPKV_ASSERT(seqs_.empty(), "KV cache: the prefix cache is enabled before any sequence");
  // The format every cached page was written in: a page is never shared across formats.
  const uint64_t format = std::hash<std::string>{}(kv_plan_to_json(plan_)) ^ std::hash<int>{}(dims_.n_layer);
  prefix_ = std::make_unique<PrefixIndex>(format);
  prefix_floor_bits_ = floor_bits;
}

// ---- matching ------------------------------------------------------------------------------------

// Blocks matching tokens[0, n) from the root, cut back until every sliding-window layer has the
// pages its next query reads. Only pages a sequence of these n tokens would have written itself
// are read: none of the positions its fp16 window would hold (so the reader ends in exactly the
// state of a sequence that computed all n tokens, and the newest positions stay at fp16), and at
// least one position is left to compute (its logits sample the next token).
std::vector<PrefixBlock*> PagedKvCache::match_chain(const int32_t* tokens, int n) const {
  std::vector<PrefixBlock*> chain;
  if (!prefix_) return chain;
  const int S = plan_.sink, P = plan_.page_tokens;
  int max_blocks = std::max(0, n - 1 - S) / P;
  for (int l = 0; l < dims_.n_layer; ++l) max_blocks = std::min(max_blocks, bytes_.tokens_in_pages(l, n) / P);
  const PrefixBlock* parent = nullptr;
  for (int j = 0; j < max_blocks; ++j) {
    const int begin = j == 0 ? 0 : S + j * P;
    PrefixBlock* b = prefix_->find(parent, tokens + begin, S + (j + 1) * P - begin);
    if (!b) break;
    chain.push_back(b);
    parent = b;
  }
  while (!chain.empty() && !chain_within_windows(chain)) chain.pop_back();
  return chain;
}

// A sliding-window layer reads, from the first computed position S + kP on, only pages ending after
// window_start: those must be cached (a block keeps no page of a layer whose window had passed it).
bool PagedKvCache::chain_within_windows(const std::vector<PrefixBlock*>& chain) const {
  const int S = plan_.sink, P = plan_.page_tokens, k = (int)chain.size();
  for (int l = 0; l < dims_.n_layer; ++l) {
    const int keep_from = window_start(dims_.window_of(l), S + k * P);
    for (int j = 0; j < k; ++j)
      if (S + (j + 1) * P > keep_from && chain[j]->page_ids[l] == 0) return false;
  }
  return true;
}

PrefixMatch PagedKvCache::prefix_match(const int32_t* tokens, int n) const {
  PrefixMatch m;
  const std::vector<PrefixBlock*> chain = match_chain(tokens, n);
  if (chain.empty()) return m;
  m.tokens = plan_.sink + (int)chain.size() * plan_.page_tokens;
  for (const PrefixBlock* b : chain) {
    if (b->holders == 0) m.cold_bytes += block_pool_bytes(*b, false);
    if (b->readers == 0) m.unpinned_bytes += block_pool_bytes(*b, true);
  }
  return m;
}

int PagedKvCache::attach_prefix(int seq, const int32_t* tokens, int n) {
  MPKV_ASSERT(!seqs_.count(seq), "KV cache: attach_prefix to existing sequence " + std::to_string(seq));
  const std::vector<PrefixBlock*> chain = match_chain(tokens, n);
  if (chain.empty()) return 0;
  for (PrefixBlock* b : chain) hold_block(*b, true);  // first: making room must not evict them
  if (!make_room(bytes_.sequence_fixed_bytes(), seq)) {
    for (size_t i = chain.size(); i-- > 0;) release_block(*chain[i], true);
    return 0;
  }
  SeqState& s = create_sequence(seq);
  pool_.charge(bytes_.sequence_fixed_bytes());
  read_blocks(s, chain);
  return plan_.sink + (int)chain.size() * plan_.page_tokens;
}

// Fills a new sequence's layers from a matched chain: the sink rows copied, the pages read (a
// sliding-window layer skips those before its window: `dropped`), the window empty.
void PagedKvCache::read_blocks(SeqState& s, const std::vector<PrefixBlock*>& chain) {
  const int S = plan_.sink, P = plan_.page_tokens, k = (int)chain.size();
  const size_t sink_elems = (size_t)S * dims_.n_head_kv * dims_.head_dim;
  for (int l = 0; l < dims_.n_layer; ++l) {
    LayerState& ls = s.layers[l];
    std::memcpy(ls.k16.data(), chain[0]->sink_k.data() + l * sink_elems, sink_elems * sizeof(uint16_t));
    std::memcpy(ls.v16.data(), chain[0]->sink_v.data() + l * sink_elems, sink_elems * sizeof(uint16_t));
    ls.sink_n = S;
    const int keep_from = window_start(dims_.window_of(l), S + k * P);
    for (int j = 0; j < k; ++j) {
      if (S + (j + 1) * P <= keep_from) {
        ls.dropped += P;
        continue;
      }
      Page& p = *pages_by_id_.at(chain[j]->page_ids[l]);
      p.refs++;
      ls.pages.push_back(&p);
    }
    ls.n_tokens = S + k * P;
  }
  s.blocks = chain;
  s.reads.assign(chain.size(), 1);
}

// ---- publishing ----------------------------------------------------------------------------------

void PagedKvCache::publish_prefix(int seq, const int32_t* tokens, int n) {
  if (!prefix_) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& s = *it->second;
  const int S = plan_.sink, P = plan_.page_tokens;
  while (!s.publish_stopped && S + ((int)s.blocks.size() + 1) * P <= n)
    if (!publish_block(s, seq, (int)s.blocks.size(), tokens)) break;
}

bool PagedKvCache::publish_block(SeqState& s, int seq, int j, const int32_t* tokens) {
  const int S = plan_.sink, P = plan_.page_tokens;
  std::vector<uint64_t> ids(dims_.n_layer, 0);
  for (int l = 0; l < dims_.n_layer; ++l) {
    const LayerState& ls = s.layers[l];
    const int i = j - ls.dropped / P;  // live pages start at block dropped / P
    if (i < 0) continue;               // left a sliding window already: not cached
    if (i >= (int)ls.pages.size() || !ls.pages[i]->full) return false;  // a later forward pass fills it
    ids[l] = ls.pages[i]->id;
  }
  PrefixBlock* parent = j == 0 ? nullptr : s.blocks[j - 1];
  const int begin = j == 0 ? 0 : S + j * P, count = S + (j + 1) * P - begin;
  if (PrefixBlock* same = prefix_->find(parent, tokens + begin, count)) return adopt_block(s, j, ids, *same);
  const size_t record = bytes_.prefix_block_record_bytes(j);
  if (!make_room(record, seq)) return !(s.publish_stopped = true);
  PrefixBlock* b = prefix_->insert(parent, tokens + begin, count, ids, record);
  if (!b) return !(s.publish_stopped = true);  // a hash collision: this prefix stays uncached
  pool_.charge(record);
  if (j == 0) {
    const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim, sink_elems = (size_t)S * row;
    b->sink_k.resize((size_t)dims_.n_layer * sink_elems);
    b->sink_v.resize((size_t)dims_.n_layer * sink_elems);
    for (int l = 0; l < dims_.n_layer; ++l) {
      std::memcpy(b->sink_k.data() + l * sink_elems, s.layers[l].k16.data(), sink_elems * sizeof(uint16_t));
      std::memcpy(b->sink_v.data() + l * sink_elems, s.layers[l].v16.data(), sink_elems * sizeof(uint16_t));
    }
  }
  for (uint64_t id : ids)
    if (id) pages_by_id_.at(id)->block = b;
  s.blocks.push_back(b);
  s.reads.push_back(0);
  return true;
}

// Another sequence cached the same tokens first (the same system prompt prefilled in one step, or
// positions a reader had to recompute: match_chain). Keeping both copies would hold bytes nobody
// shares, so s reads the cached pages and frees its own, as vLLM does with a duplicate block. The
// cached pages hold the KV of the same tokens (bit for bit for f16; for a quantized cache computed
// in another sequence's window state) and may have shrunk meanwhile. A layer whose cached page
// had left its sliding window cannot swap: then s stops publishing.
bool PagedKvCache::adopt_block(SeqState& s, int j, const std::vector<uint64_t>& ids, PrefixBlock& same) {
  const int P = plan_.page_tokens;
  for (int l = 0; l < dims_.n_layer; ++l)
    if (ids[l] && !same.page_ids[l]) return !(s.publish_stopped = true);
  hold_block(same, true);
  for (int l = 0; l < dims_.n_layer; ++l) {
    if (!ids[l]) continue;
    LayerState& ls = s.layers[l];
    Page*& slot = ls.pages[j - ls.dropped / P];
    Page& theirs = *pages_by_id_.at(same.page_ids[l]);
    theirs.refs++;
    Page& mine = *slot;
    slot = &theirs;
    unref_page(mine);  // not cached: freed
  }
  s.blocks.push_back(&same);
  s.reads.push_back(1);
  return true;
}

// ---- hot and cold ----------------------------------------------------------------------------------

size_t PagedKvCache::block_pool_bytes(const PrefixBlock& b, bool at_final_bits) const {
  size_t sum = b.record_bytes;
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    const Page& p = *pages_by_id_.at(id);
    sum += (at_final_bits ? page_bytes_final(p) : p.bytes) + bytes_.page_metadata_bytes();
  }
  return sum;
}

void PagedKvCache::hold_block(PrefixBlock& b, bool reader) {
  const bool first_reader = reader && b.readers == 0;
  if (prefix_->hold(&b, reader)) block_went_hot(b);
  if (first_reader) pinned_bytes_ += block_pool_bytes(b, true);
}

void PagedKvCache::release_block(PrefixBlock& b, bool reader) {
  if (prefix_->release(&b, reader)) block_went_cold(b);
  if (reader && b.readers == 0) pinned_bytes_ -= block_pool_bytes(b, true);
}

// The block's pages leave the running accounting (reclaimable_, running queue) for the cold one.
void PagedKvCache::block_went_cold(PrefixBlock& b) {
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    Page& p = *pages_by_id_.at(id);
    MPKV_ASSERT(p.refs == 0 && p.full, "KV cache: a cold cached page is still read or not full");
    reclaimable_ -= p.bytes - page_bytes_final(p);
    queue_next_shrink(p);  // cold now: the cold queue, or none at the floor
  }
  cold_bytes_ += block_pool_bytes(b, false);
}

void PagedKvCache::block_went_hot(PrefixBlock& b) {
  cold_bytes_ -= block_pool_bytes(b, false);
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    Page& p = *pages_by_id_.at(id);
    reclaimable_ += p.bytes - page_bytes_final(p);
    queue_next_shrink(p);
  }
}

void PagedKvCache::evict(PrefixBlock& b) {
  cold_bytes_ -= block_pool_bytes(b, false);
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    Page& p = *pages_by_id_.at(id);
    MPKV_ASSERT(p.refs == 0, "KV cache: evicting a page a sequence reads");
    destroy_page(p);
  }
  pool_.release(b.record_bytes);
  prefix_->erase(&b);
}

// ---- reports and checks ------------------------------------------------------------------------------

PrefixCacheStats PagedKvCache::prefix_stats() const {
  PrefixCacheStats st;
  if (!prefix_) return st;
  st.evictions = prefix_->evictions();
  st.cold_halvings = cold_halvings_;
  st.cold_bytes = cold_bytes_;
  prefix_->for_each([&](const PrefixBlock& b) {
    st.blocks++;
    if (b.holders == 0) st.cold_blocks++;
    st.bytes += block_pool_bytes(b, false);
    for (uint64_t id : b.page_ids) {
      if (!id) continue;
      const Page& p = *pages_by_id_.at(id);
      st.pages_by_bits[*std::max_element(p.cur.begin(), p.cur.end())]++;
    }
  });
  return st;
}

void PagedKvCache::check_consistency() const {
  std::unordered_map<uint64_t, int> reads;
  std::unordered_map<const PrefixBlock*, std::pair<int, int>> holds;  // (holders, readers) from the sequences
  size_t used = 0, reclaim = 0, cold = 0, pinned = 0;
  for (const auto& [seq, s] : seqs_) {
    used += bytes_.sequence_fixed_bytes();
    for (size_t i = 0; i < s->blocks.size(); ++i) {
      holds[s->blocks[i]].first++;
      holds[s->blocks[i]].second += s->reads[i];
    }
    for (const LayerState& ls : s->layers)
      for (const Page* p : ls.pages) {
        MPKV_ASSERT(pages_by_id_.count(p->id) && pages_by_id_.at(p->id).get() == p, "KV check: a read page was freed");
        reads[p->id]++;
      }
  }
  for (const auto& [id, p] : pages_by_id_) {
    MPKV_ASSERT(p->refs == reads[id], "KV check: page " + std::to_string(id) + " refs " + std::to_string(p->refs) +
                                          ", read by " + std::to_string(reads[id]));
    MPKV_ASSERT(p->refs > 0 || p->block, "KV check: a page nobody holds was kept");
    used += p->bytes + bytes_.page_metadata_bytes();
    if (p->full && !is_cold(*p)) reclaim += p->bytes - page_bytes_final(*p);
  }
  if (prefix_) {
    prefix_->for_each([&](const PrefixBlock& b) {
      const auto h = holds.count(&b) ? holds.at(&b) : std::pair<int, int>{0, 0};
      MPKV_ASSERT(b.holders == h.first && b.readers == h.second,
                  "KV check: block " + std::to_string(b.id) + " holders/readers " + std::to_string(b.holders) + "/" +
                      std::to_string(b.readers) + ", sequences hold it " + std::to_string(h.first) + "/" +
                      std::to_string(h.second));
      used += b.record_bytes;
      if (b.holders == 0) cold += block_pool_bytes(b, false);
      if (b.readers > 0) pinned += block_pool_bytes(b, true);
    });
  }
  MPKV_ASSERT(used == pool_.used(), "KV check: pool used " + std::to_string(pool_.used()) + ", records " +
                                        std::to_string(used));
  MPKV_ASSERT(reclaim == reclaimable_ && cold == cold_bytes_ && pinned == pinned_bytes_,
              "KV check: reclaimable/cold/pinned bytes drifted from the records");
  MPKV_ASSERT(pool_.budget() == 0 || pool_.used() + pool_.held() <= pool_.budget(), "KV check: over budget");
}

void PagedKvCache::shrink_page_to(int seq, int layer, int page, int bits) {
  Page& p = *seq_state(seq).layers.at(layer).pages.at(page);
  MPKV_CHECK(p.full, "KV cache: only a full page can shrink");
  ShrinkPause pause;
  while (shrink_top_bits(p) > bits) shrink_page(p, pause);
}

}  // namespace mpkv

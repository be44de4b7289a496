#include "kvcache/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace mpkv {

PrefixCache::PrefixCache(const KvDims& dims, const KvPlan& plan, const KvByteModel& bytes, PageStore& store,
                         KvAccountant& acct, uint64_t format_hash)
    : dims_(dims), plan_(plan), bytes_(bytes), store_(store), acct_(acct), index_(format_hash) {}

// ---- matching ------------------------------------------------------------------------------------

// Blocks matching tokens[0, n) from the root, cut back until every sliding-window layer has the
// pages its next query reads. Only pages a sequence of these n tokens would have written itself
// are read: none of the positions its fp16 window would hold (so the reader ends in exactly the
// state of a sequence that computed all n tokens, and the newest positions stay at fp16), and at
// least one position is left to compute (its logits sample the next token).
std::vector<PrefixBlock*> PrefixCache::match_chain(const int32_t* tokens, int n) const {
  std::vector<PrefixBlock*> chain;
  const int S = plan_.sink, P = plan_.page_tokens;
  int max_blocks = std::max(0, n - 1 - S) / P;
  for (int l = 0; l < dims_.n_layer; ++l) max_blocks = std::min(max_blocks, bytes_.tokens_in_pages(l, n) / P);
  const PrefixBlock* parent = nullptr;
  for (int j = 0; j < max_blocks; ++j) {
    const int begin = j == 0 ? 0 : S + j * P;
    PrefixBlock* b = index_.find(parent, tokens + begin, S + (j + 1) * P - begin);
    if (!b) break;
    chain.push_back(b);
    parent = b;
  }
  while (!chain.empty() && !chain_within_windows(chain)) chain.pop_back();
  return chain;
}

// A sliding-window layer reads, from the first computed position S + kP on, only pages ending after
// window_start: those must be cached (a block keeps no page of a layer whose window had passed it).
bool PrefixCache::chain_within_windows(const std::vector<PrefixBlock*>& chain) const {
  const int S = plan_.sink, P = plan_.page_tokens, k = (int)chain.size();
  for (int l = 0; l < dims_.n_layer; ++l) {
    const int keep_from = window_start(dims_.window_of(l), S + k * P);
    for (int j = 0; j < k; ++j)
      if (S + (j + 1) * P > keep_from && chain[j]->page_ids[l] == 0) return false;
  }
  return true;
}

PrefixMatch PrefixCache::match(const int32_t* tokens, int n) const {
  PrefixMatch m;
  const std::vector<PrefixBlock*> chain = match_chain(tokens, n);
  if (chain.empty()) return m;
  m.tokens = plan_.sink + (int)chain.size() * plan_.page_tokens;
  for (const PrefixBlock* b : chain) {
    if (b->holders == 0) m.cold_bytes += acct_.block_pool_bytes(*b, false);
    if (b->readers == 0) m.unpinned_bytes += acct_.block_pool_bytes(*b, true);
  }
  return m;
}

int PrefixCache::attach(int seq, const int32_t* tokens, int n) {
  MPKV_ASSERT(!store_.find(seq), "KV cache: attach_prefix to existing sequence " + std::to_string(seq));
  const std::vector<PrefixBlock*> chain = match_chain(tokens, n);
  if (chain.empty()) return 0;
  for (PrefixBlock* b : chain) hold_block(*b, true);  // first: making room must not evict them
  if (!acct_.make_room(bytes_.sequence_fixed_bytes(), seq)) {
    for (size_t i = chain.size(); i-- > 0;) release_block(*chain[i], true);
    return 0;
  }
  KvSeqState& s = store_.create_sequence(seq);
  acct_.charge_fitting(bytes_.sequence_fixed_bytes());
  read_blocks(s, chain);
  return plan_.sink + (int)chain.size() * plan_.page_tokens;
}

// Fills a new sequence's layers from a matched chain: the sink rows copied, the pages read (a
// sliding-window layer skips those before its window: `dropped`), the window empty.
void PrefixCache::read_blocks(KvSeqState& s, const std::vector<PrefixBlock*>& chain) {
  const int S = plan_.sink, P = plan_.page_tokens, k = (int)chain.size();
  const size_t sink_elems = (size_t)S * dims_.n_head_kv * dims_.head_dim;
  for (int l = 0; l < dims_.n_layer; ++l) {
    KvLayerState& ls = s.layers[l];
    std::memcpy(ls.k16.data(), chain[0]->sink_k.data() + l * sink_elems, sink_elems * sizeof(uint16_t));
    std::memcpy(ls.v16.data(), chain[0]->sink_v.data() + l * sink_elems, sink_elems * sizeof(uint16_t));
    ls.sink_n = S;
    const int keep_from = window_start(dims_.window_of(l), S + k * P);
    for (int j = 0; j < k; ++j) {
      if (S + (j + 1) * P <= keep_from) {
        ls.dropped += P;
        continue;
      }
      KvPage& p = store_.page(chain[j]->page_ids[l]);
      p.refs++;
      ls.pages.push_back(&p);
    }
    ls.n_tokens = S + k * P;
  }
  s.blocks = chain;
  s.reads.assign(chain.size(), 1);
}

// ---- publishing ----------------------------------------------------------------------------------

void PrefixCache::publish(int seq, const int32_t* tokens, int n) {
  KvSeqState* s = store_.find(seq);
  if (!s) return;
  const int S = plan_.sink, P = plan_.page_tokens;
  while (!s->publish_stopped && S + ((int)s->blocks.size() + 1) * P <= n)
    if (!publish_block(*s, seq, (int)s->blocks.size(), tokens)) break;
}

bool PrefixCache::publish_block(KvSeqState& s, int seq, int j, const int32_t* tokens) {
  const int S = plan_.sink, P = plan_.page_tokens;
  std::vector<uint64_t> ids(dims_.n_layer, 0);
  for (int l = 0; l < dims_.n_layer; ++l) {
    const KvLayerState& ls = s.layers[l];
    const int i = j - ls.dropped / P;  // live pages start at block dropped / P
    if (i < 0) continue;               // left a sliding window already: not cached
    if (i >= (int)ls.pages.size() || !ls.pages[i]->full) return false;  // a later forward pass fills it
    ids[l] = ls.pages[i]->id;
  }
  PrefixBlock* parent = j == 0 ? nullptr : s.blocks[j - 1];
  const int begin = j == 0 ? 0 : S + j * P, count = S + (j + 1) * P - begin;
  if (PrefixBlock* same = index_.find(parent, tokens + begin, count)) return adopt_block(s, j, ids, *same);
  const size_t record = bytes_.prefix_block_record_bytes(j);
  if (!acct_.make_room(record, seq)) return !(s.publish_stopped = true);
  PrefixBlock* b = index_.insert(parent, tokens + begin, count, ids, record);
  if (!b) return !(s.publish_stopped = true);  // a hash collision: this prefix stays uncached
  acct_.charge_fitting(record);
  if (j == 0) copy_sink_rows(s, *b);
  for (uint64_t id : ids)
    if (id) store_.page(id).block = b;
  s.blocks.push_back(b);
  s.reads.push_back(0);
  return true;
}

// Block 0 keeps the sink rows of every layer: [n_layer][S][n_head_kv * head_dim] fp16.
void PrefixCache::copy_sink_rows(const KvSeqState& s, PrefixBlock& b) const {
  const size_t sink_elems = (size_t)plan_.sink * dims_.n_head_kv * dims_.head_dim;
  b.sink_k.resize((size_t)dims_.n_layer * sink_elems);
  b.sink_v.resize((size_t)dims_.n_layer * sink_elems);
  for (int l = 0; l < dims_.n_layer; ++l) {
    std::memcpy(b.sink_k.data() + l * sink_elems, s.layers[l].k16.data(), sink_elems * sizeof(uint16_t));
    std::memcpy(b.sink_v.data() + l * sink_elems, s.layers[l].v16.data(), sink_elems * sizeof(uint16_t));
  }
}

// Another sequence cached the same tokens first (the same system prompt prefilled in one step, or
// positions a reader had to recompute: match_chain). Keeping both copies would hold bytes nobody
// shares, so s reads the cached pages and frees its own, as vLLM does with a duplicate block. The
// cached pages hold the KV of the same tokens (bit for bit for f16; for a quantized cache computed
// in another sequence's window state) and may have shrunk meanwhile. A layer whose cached page
// had left its sliding window cannot swap: then s stops publishing.
bool PrefixCache::adopt_block(KvSeqState& s, int j, const std::vector<uint64_t>& ids, PrefixBlock& same) {
  const int P = plan_.page_tokens;
  for (int l = 0; l < dims_.n_layer; ++l)
    if (ids[l] && !same.page_ids[l]) return !(s.publish_stopped = true);
  hold_block(same, true);
  for (int l = 0; l < dims_.n_layer; ++l) {
    if (!ids[l]) continue;
    KvLayerState& ls = s.layers[l];
    KvPage*& slot = ls.pages[j - ls.dropped / P];
    KvPage& theirs = store_.page(same.page_ids[l]);
    theirs.refs++;
    KvPage& mine = *slot;
    slot = &theirs;
    acct_.unref_page(mine);  // not cached: freed
  }
  s.blocks.push_back(&same);
  s.reads.push_back(1);
  return true;
}

// ---- holders, cold blocks, eviction -------------------------------------------------------------

void PrefixCache::hold_block(PrefixBlock& b, bool reader) {
  const bool first_reader = reader && b.readers == 0;
  if (index_.hold(&b, reader)) acct_.block_went_hot(b);
  if (first_reader) acct_.pin(b);
}

void PrefixCache::release_block(PrefixBlock& b, bool reader) {
  if (index_.release(&b, reader)) acct_.block_went_cold(b);
  if (reader && b.readers == 0) acct_.unpin(b);
}

void PrefixCache::release_all(KvSeqState& s) {
  for (size_t i = s.blocks.size(); i-- > 0;) release_block(*s.blocks[i], s.reads[i]);
}

size_t PrefixCache::evict_coldest() {
  PrefixBlock* b = index_.next_to_evict();
  if (!b) return 0;
  const size_t before = acct_.pool().used();
  evict(*b);
  return before - acct_.pool().used();
}

void PrefixCache::evict(PrefixBlock& b) {
  acct_.block_evicting(b);
  for (uint64_t id : b.page_ids) {
    if (!id) continue;
    KvPage& p = store_.page(id);
    MPKV_ASSERT(p.refs == 0, "KV cache: evicting a page a sequence reads");
    acct_.destroy_page(p);
  }
  acct_.release(b.record_bytes);
  index_.erase(&b);
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats st;
  st.evictions = index_.evictions();
  st.cold_halvings = acct_.cold_halvings();
  st.cold_bytes = acct_.cold_bytes();
  index_.for_each([&](const PrefixBlock& b) {
    st.blocks++;
    if (b.holders == 0) st.cold_blocks++;
    st.bytes += acct_.block_pool_bytes(b, false);
    for (uint64_t id : b.page_ids) {
      if (!id) continue;
      const KvPage& p = store_.page(id);
      st.pages_by_bits[*std::max_element(p.cur.begin(), p.cur.end())]++;
    }
  });
  return st;
}

}  // namespace mpkv

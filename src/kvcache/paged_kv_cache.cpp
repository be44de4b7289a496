#include "kvcache/paged_kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <new>
#include <sstream>

#include "kvcache/paged_attend.h"
#include "kvcache/prefix_cache.h"
#include "util/error.h"
#include "util/units.h"

namespace mpkv {

PagedKvCache::PagedKvCache(KvDims dims, KvPlan plan, size_t budget_bytes, const PagedAttentionKernels& kernels)
    : KvCache(dims),
      plan_(std::move(plan)),
      bytes_(dims_, plan_),
      kern_(&kernels),
      store_(dims_, plan_, bytes_),
      acct_(store_, bytes_, budget_bytes, plan_.progressive && has_shrink_costs(plan_)) {}

PagedKvCache::~PagedKvCache() = default;

// ---- budget ---------------------------------------------------------------------------------------

bool PagedKvCache::reserve(int seq, int n_tokens) {
  MPKV_ASSERT(n_tokens >= 0, "KV reserve: negative token count");
  KvSeqState* s = store_.find(seq);
  if (s) {
    acct_.unhold(*s);
    drop_finished_rows(*s);
  }
  const size_t need = acct_.bytes_needed(s, n_tokens);
  // Short of room: the other sequences' finished rows go before any page shrinks or the
  // reservation fails (a sequence whose last pass was a prefill chunk still holds what that
  // chunk's queries read behind a sliding window, beyond its byte bound, until it reserves again).
  if (!acct_.pool().fits(need))
    for (const auto& [other_id, other] : store_.sequences()) drop_finished_rows(*other);
  if (!acct_.make_room(need, seq)) return false;
  if (s) {
    acct_.hold(*s, need);
    return true;
  }
  KvSeqState& created = store_.create_sequence(seq);
  acct_.hold(created, need);
  acct_.charge(created, seq, bytes_.sequence_fixed_bytes(), "its sink and window");
  return true;
}

void PagedKvCache::remove(int seq) {
  KvSeqState* s = store_.find(seq);
  if (!s) return;
  for (KvLayerState& ls : s->layers)
    for (KvPage* p : ls.pages) acct_.unref_page(*p);
  if (prefix_) prefix_->release_all(*s);
  acct_.unhold(*s);
  acct_.release(bytes_.sequence_fixed_bytes());
  store_.erase_sequence(seq);
}

// ---- storage --------------------------------------------------------------------------------------

KvSeqState& PagedKvCache::new_sequence(int seq) {
  const size_t fixed = bytes_.sequence_fixed_bytes();
  if (!acct_.make_room(fixed, seq)) {
    throw Error("KV budget of " + mib(acct_.pool().budget()) + " cannot hold another sequence (" + mib(fixed) +
                " for its sink and window; " + mib(acct_.pool().used()) + " in use)");
  }
  KvSeqState& s = store_.create_sequence(seq);
  acct_.charge_fitting(fixed);
  return s;
}

KvPage& PagedKvCache::open_page(KvSeqState& s, int seq, int layer) {
  KvLayerState& ls = s.layers[layer];
  if (KvPage* p = store_.open_page(ls)) return *p;
  acct_.charge(s, seq, bytes_.new_page_bytes(layer), "a new page");
  try {
    return store_.new_page(ls, seq, layer);
  } catch (const std::bad_alloc&) {
    acct_.release(bytes_.new_page_bytes(layer));
    throw;
  }
}

void PagedKvCache::flush(KvSeqState& s, int seq, int layer, int k) {
  KvLayerState& ls = s.layers[layer];
  for (int done = 0; done < k;) {
    KvPage& p = open_page(s, seq, layer);
    const int m = std::min(k - done, plan_.page_tokens - p.filled);
    store_.write_window_rows(ls, done, m, p);
    done += m;
    if (p.filled == plan_.page_tokens) acct_.page_filled(p);
  }
  store_.pop_window_rows(ls, k);
}

void PagedKvCache::append(int seq, int layer, int n_tokens, const float* k, const float* v) {
  MPKV_ASSERT(layer >= 0 && layer < dims_.n_layer, "KV append: layer " + std::to_string(layer) + " out of range");
  MPKV_ASSERT(n_tokens >= 0, "KV append: negative token count");
  KvSeqState* found = store_.find(seq);
  KvSeqState& s = found ? *found : new_sequence(seq);
  KvLayerState& ls = s.layers[layer];
  const int first_query = ls.n_tokens;         // the earliest position that attends after this append
  drop_out_of_window(ls, layer, first_query);  // before this append charges new pages
  // Several tokens: keep the rows this append flushes readable as fp16 by its own queries (the
  // stage, kv_page_records.h). One token (decoding) reads the window as it stands: no copy.
  const bool staged = n_tokens > 1;
  if (staged) store_.open_stage(ls, n_tokens);
  else if (ls.stage) store_.drop_stage(ls);
  int i = 0;
  for (; i < n_tokens && ls.sink_n < plan_.sink; ++i) {
    store_.put_row(ls, ls.sink_n++, k, v, i);
    ls.n_tokens++;
  }
  const int R = bytes_.window(layer), g = bytes_.flush_granularity(layer), cap = R + plan_.page_tokens;
  while (i < n_tokens) {
    const int m = std::min(n_tokens - i, cap - ls.win_n);
    for (int r = 0; r < m; ++r) store_.put_row(ls, plan_.sink + ls.win_n + r, k, v, i + r);
    if (staged) store_.stage_window_rows(ls, ls.win_n, m);
    ls.win_n += m;
    ls.n_tokens += m;
    i += m;
    // Keep the window in [R, R + g): flush its oldest whole groups.
    if (ls.win_n > R) {
      const int kf = (ls.win_n - R) / g * g;
      if (kf > 0) flush(s, seq, layer, kf);
    }
  }
  drop_out_of_window(ls, layer, first_query);
}

// Their bytes go back to the pool, crediting the budget; what attention returns does not change.
void PagedKvCache::drop_finished_rows(KvSeqState& s) {
  for (int l = 0; l < dims_.n_layer; ++l) {
    store_.drop_stage(s.layers[l]);  // the staged rows of the sequence's last pass
    drop_out_of_window(s.layers[l], l, s.layers[l].n_tokens);
  }
}

void PagedKvCache::drop_out_of_window(KvLayerState& ls, int layer, int first_query) {
  const size_t n = store_.pages_before_window(ls, layer, first_query);
  for (size_t i = 0; i < n; ++i) {
    ls.dropped += ls.pages[i]->filled;
    acct_.unref_page(*ls.pages[i]);
  }
  ls.pages.erase(ls.pages.begin(), ls.pages.begin() + n);
}

int PagedKvCache::length(int seq, int layer) const {
  const KvSeqState* s = store_.find(seq);
  return s ? s->layers[layer].n_tokens : 0;
}

// ---- attention ------------------------------------------------------------------------------------

void PagedKvCache::attend(int seq, int layer, int n_tokens, const float* q, float* out) {
  attend_pages(store_, *kern_, q8_queries_, layer, {{seq, 0, n_tokens}}, q, out);
}

void PagedKvCache::attend_batch(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out) {
  attend_pages(store_, *kern_, q8_queries_, layer, spans, q, out);
}

// ---- prefix cache ---------------------------------------------------------------------------------

void PagedKvCache::enable_prefix_cache(int floor_bits) {
  MPKV_CHECK(acct_.pool().budget() > 0, "the prefix cache needs a KV budget (nothing would ever evict its pages)");
  MPKV_CHECK(floor_bits == 0 || floor_bits == 2 || floor_bits == 4 || floor_bits == 8 || floor_bits == 16,
             "--prefix-cache-floor-bits must be 2, 4, 8 or 16 (0: each page's final bits), got " +
                 std::to_string(floor_bits));
  MPKV_ASSERT(store_.sequences().empty(), "KV cache: the prefix cache is enabled before any sequence");
  // The format every cached page was written in: a page is never shared across formats.
  const uint64_t format = std::hash<std::string>{}(kv_plan_to_json(plan_)) ^ std::hash<int>{}(dims_.n_layer);
  prefix_ = std::make_unique<PrefixCache>(dims_, plan_, bytes_, store_, acct_, format);
  acct_.set_prefix(floor_bits, [this] { return prefix_->evict_coldest(); });
}

PrefixMatch PagedKvCache::prefix_match(const int32_t* tokens, int n) const {
  return prefix_ ? prefix_->match(tokens, n) : PrefixMatch{};
}

int PagedKvCache::attach_prefix(int seq, const int32_t* tokens, int n) {
  return prefix_ ? prefix_->attach(seq, tokens, n) : 0;
}

void PagedKvCache::publish_prefix(int seq, const int32_t* tokens, int n) {
  if (prefix_) prefix_->publish(seq, tokens, n);
}

PrefixCacheStats PagedKvCache::prefix_stats() const { return prefix_ ? prefix_->stats() : PrefixCacheStats{}; }

// ---- reports --------------------------------------------------------------------------------------

std::string PagedKvCache::stats() const {
  const PagePool& pool = acct_.pool();
  std::ostringstream o;
  o << "kv " << kv_plan_method_name(plan_.method) << (plan_.progressive ? " (progressive)" : "") << ": " << mib(pool.used()) << " in use";
  if (pool.budget() > 0) o << " of " << mib(pool.budget()) << " budget";
  o << " (peak " << mib(pool.peak_used()) << "), " << store_.sequences().size() << " sequences, " << store_.pages().size()
    << " pages\n  blocks by current bits:";
  const auto hist = bits_histogram();
  size_t total = 0;
  for (const auto& [b, n] : hist) total += n;
  for (auto it = hist.rbegin(); it != hist.rend(); ++it) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %d-bit %zu (%.1f%%)", it->first, it->second, 100.0 * it->second / std::max<size_t>(1, total));
    o << buf;
  }
  if (hist.empty()) o << " none";
  const ShrinkTotals& t = acct_.shrink_totals();
  char buf[200];
  std::snprintf(buf, sizeof buf, "\n  shrinks: %zu pages in %zu pauses, %.2f ms total, longest pause %.3f ms, %s freed",
                t.page_shrinks, t.pauses, 1e3 * t.seconds, 1e3 * t.max_pause_seconds, mib(t.bytes_freed).c_str());
  o << buf;
  if (prefix_) {
    const PrefixCacheStats p = prefix_->stats();
    std::snprintf(buf, sizeof buf, "\n  prefix cache: %zu blocks (%zu cold, %s), %llu evicted, %llu cold halvings",
                  p.blocks, p.cold_blocks, mib(p.cold_bytes).c_str(), (unsigned long long)p.evictions,
                  (unsigned long long)p.cold_halvings);
    o << buf;
  }
  return o.str();
}

int PagedKvCache::n_pages(int seq, int layer) const { return (int)store_.seq(seq).layers.at(layer).pages.size(); }

const uint8_t* PagedKvCache::page_block(int seq, int layer, int page, int block, KvBlockLayout* layout) const {
  const KvPage& p = *store_.seq(seq).layers.at(layer).pages.at(page);
  const KvComponent& c = store_.comp(layer, block);
  MPKV_CHECK(!c.fp16, "KV cache: block " + std::to_string(block) + " is stored as fp16 rows");
  if (layout) *layout = c.layout_at[p.cur.at(block)];
  return p.data + store_.block_offset(p, block);
}

}  // namespace mpkv

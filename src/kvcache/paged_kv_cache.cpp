#include "kvcache/paged_kv_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

#include "attention/paged_attention.h"
#include "kvcache/paged_kv_cache_records.h"
#include "quant/lloyd_max.h"
#include "util/error.h"
#include "util/units.h"
#include "util/fp16.h"

namespace mpkv {

PagedKvCache::PagedKvCache(KvDims dims, KvPlan plan, size_t budget_bytes, const PagedAttentionKernels& kernels)
    : KvCache(dims), plan_(std::move(plan)), bytes_(dims_, plan_), kern_(&kernels), pool_(budget_bytes) {
  // The record constants bound the structs; the rest of each covers their container nodes
  // (page: table slot, id-map node, shrink queue set + map nodes, about 64 bytes each).
  static_assert(sizeof(Page) + sizeof(void*) <= kPageRecordBytes - 3 * 64, "page record");
  static_assert(sizeof(LayerState) <= kLayerRecordBytes, "layer record");
  static_assert(sizeof(SeqState) + 64 <= kSequenceRecordBytes, "sequence record");
  shrink_by_cost_ = plan_.progressive && has_shrink_costs(plan_);
  n_blocks_ = bytes_.blocks_per_page();
  comps_.resize((size_t)dims.n_layer * n_blocks_);
  for (int l = 0; l < dims.n_layer; ++l) {
    for (int b = 0; b < n_blocks_; ++b) {
      const KvRole role = b % 2 == 0 ? KvRole::key : KvRole::value;
      const KvComponentPlan& cp = plan_.at(l, b / 2, role);
      Component& c = comps_[(size_t)l * n_blocks_ + b];
      c.fp16 = cp.fp16;
      if (cp.fp16) continue;
      for (const auto& [bits, sens] : cp.sensitivity)
        if (bits >= 1 && bits <= 16) c.sensitivity_at[bits] = sens;
      const int init = bytes_.initial_bits(l, b), fin = bytes_.final_bits(l, b);
      c.quant = std::make_unique<KvQuantizer>(component_quant_options(plan_, cp, role, init));
      // Pages are written at the initial bits; each halving's layout carries the exact ladder
      // scale (halved_layout: scale_mult, kv_block_layout.h).
      c.layout_at[init] = c.quant->block_layout(plan_.page_tokens);
      for (int bits = init; bits > fin; bits /= 2) c.layout_at[bits / 2] = halved_layout(c.layout_at[bits]);
      for (int bits = init; bits >= fin && bits >= 1; bits /= 2) {
        MPKV_ASSERT(c.layout_at[bits].bytes == bytes_.block_bytes(l, b, bits), "KV byte model and quantizer disagree");
        if (bits == 1) break;
      }
      if (c.layout_at[init].codec == Codec::lloyd_max) c.centroids = lloyd_max_gaussian(fin).centroids_f.data();
    }
  }
}

PagedKvCache::~PagedKvCache() {
  for (auto& [id, p] : pages_by_id_) std::free(p->data);
}

// ---- accounting (the figures: kv_byte_model.h) ---------------------------------------------------

size_t PagedKvCache::block_offset(const Page& p, int block) const {
  size_t off = 0;
  for (int b = 0; b < block; ++b) off += block_bytes(p.layer, b, p.cur[b]);
  return off;
}

size_t PagedKvCache::page_bytes_now(const Page& p) const { return block_offset(p, n_blocks_); }

size_t PagedKvCache::page_bytes_final(const Page& p) const {
  size_t b = 0;
  for (int i = 0; i < n_blocks_; ++i) b += block_bytes(p.layer, i, p.fin[i]);
  return b;
}

size_t PagedKvCache::bytes_needed(int seq, int n) const {
  auto it = seqs_.find(seq);
  const SeqState* s = it == seqs_.end() ? nullptr : it->second.get();
  size_t need = s ? 0 : bytes_.sequence_fixed_bytes();
  for (int l = 0; l < dims_.n_layer; ++l) {
    KvLayerFill fill;
    if (s) {
      const LayerState& ls = s->layers[l];
      fill.n_tokens = ls.n_tokens;
      fill.window_rows = ls.win_n;
      if (!ls.pages.empty() && ls.pages.back()->filled < plan_.page_tokens)
        fill.open_page_free = plan_.page_tokens - ls.pages.back()->filled;
    }
    need += bytes_.append_bytes(l, fill, n);
  }
  return need;
}

// ---- budget -------------------------------------------------------------------------------------

// The order of docs/serving.md "Prefix cache": cold cached pages shrink (coldest first, to the
// prefix floor), then cold blocks are evicted (coldest leaves first), then the pages sequences read
// shrink (cheapest halving first).
bool PagedKvCache::free_one(ShrinkPause& pause) {
  if (const auto id = pool_.next_to_shrink(ShrinkQueue::cold)) {
    shrink_page(*pages_by_id_.at(*id), pause);
    return true;
  }
  if (prefix_) {
    if (PrefixBlock* b = prefix_->next_to_evict()) {
      const size_t before = pool_.used();
      evict(*b);
      pause.bytes_freed += before - pool_.used();
      return true;
    }
  }
  if (const auto id = pool_.next_to_shrink(ShrinkQueue::running)) {
    shrink_page(*pages_by_id_.at(*id), pause);
    return true;
  }
  return false;
}

bool PagedKvCache::make_room(size_t bytes, int for_seq) {
  if (pool_.fits(bytes)) return true;
  if (bytes > pool_.free_bytes() + reclaimable_ + cold_bytes_) return false;
  ShrinkPause pause;
  pause.for_seq = for_seq;
  const double t0 = now_s();
  while (!pool_.fits(bytes)) MPKV_ASSERT(free_one(pause), "KV pool: reclaimable bytes but nothing to shrink or evict");
  pause.seconds = now_s() - t0;
  shrink_totals_.pauses++;
  shrink_totals_.page_shrinks += pause.pages;
  shrink_totals_.bytes_freed += pause.bytes_freed;
  shrink_totals_.seconds += pause.seconds;
  shrink_totals_.max_pause_seconds = std::max(shrink_totals_.max_pause_seconds, pause.seconds);
  if (on_pause_) on_pause_(pause);
  return true;
}

size_t PagedKvCache::shrink(size_t bytes) {
  ShrinkPause pause;
  pause.for_seq = -1;
  while (pause.bytes_freed < bytes && free_one(pause)) {
  }
  return pause.bytes_freed;
}

bool PagedKvCache::is_cold(const Page& p) const { return p.block != nullptr && p.block->holders == 0; }

int PagedKvCache::block_floor(const Page& p, int block) const {
  return is_cold(p) && prefix_floor_bits_ > p.fin[block] ? prefix_floor_bits_ : p.fin[block];
}

int PagedKvCache::shrink_top_bits(const Page& p) const {
  int top = 0;
  for (int b = 0; b < n_blocks_; ++b)
    if (p.cur[b] > block_floor(p, b)) top = std::max(top, (int)p.cur[b]);
  return top;
}

// A page's next halving shrinks every block at the top bits above its floor (shrink_page). A cold
// page waits in the cold queue by its block's last use (PrefixIndex::cold_cost). Otherwise its
// cost: with calibrated shrink costs, the sensitivity it adds, sum of s(top / 2) - s(top) over
// those blocks, per byte it frees; without, -top (most bits first). Ties: oldest first (PagePool).
void PagedKvCache::queue_next_shrink(const Page& p) {
  const int top = shrink_top_bits(p);
  if (top == 0) return pool_.forget(p.id);
  if (is_cold(p)) return pool_.set_shrinkable(p.id, PrefixIndex::cold_cost(*p.block), ShrinkQueue::cold);
  if (!shrink_by_cost_) return pool_.set_shrinkable(p.id, -(double)top);
  double added = 0;
  size_t freed = 0;
  for (int b = 0; b < n_blocks_; ++b) {
    if (p.cur[b] != top || p.cur[b] <= p.fin[b]) continue;
    const Component& c = comp(p.layer, b);
    added += c.sensitivity_at[top / 2] - c.sensitivity_at[top];
    freed += block_bytes(p.layer, b, top) - block_bytes(p.layer, b, top / 2);
  }
  pool_.set_shrinkable(p.id, added / (double)std::max<size_t>(freed, 1));
}

void PagedKvCache::shrink_page(Page& p, ShrinkPause& pause) {
  const int top = shrink_top_bits(p);
  MPKV_ASSERT(top > 0, "KV pool: shrinking a page that is at its final bits");
  std::vector<uint8_t> cur2 = p.cur;
  for (int b = 0; b < n_blocks_; ++b) {
    if (p.cur[b] == top && p.cur[b] > block_floor(p, b)) {
      cur2[b] = (uint8_t)(top / 2);
      shrink_totals_.halvings_from[top]++;
    }
  }
  size_t new_bytes = 0;
  for (int b = 0; b < n_blocks_; ++b) new_bytes += block_bytes(p.layer, b, cur2[b]);
  // Through a scratch copy (shrink kernels need distinct source and destination), then the page
  // is reallocated in place to its new size.
  std::vector<uint8_t> scratch(new_bytes);
  size_t src = 0, dst = 0;
  for (int b = 0; b < n_blocks_; ++b) {
    const size_t sb = block_bytes(p.layer, b, p.cur[b]), db = block_bytes(p.layer, b, cur2[b]);
    if (cur2[b] != p.cur[b]) {
      const Component& c = comp(p.layer, b);
      shrink_block(c.layout_at[p.cur[b]], p.data + src, c.layout_at[cur2[b]], scratch.data() + dst);
    } else {
      std::memcpy(scratch.data() + dst, p.data + src, sb);
    }
    src += sb;
    dst += db;
  }
  std::memcpy(p.data, scratch.data(), new_bytes);
  if (void* r = std::realloc(p.data, new_bytes)) p.data = static_cast<uint8_t*>(r);
  const size_t freed = p.bytes - new_bytes;
  p.bytes = new_bytes;
  p.cur = cur2;
  pool_.release(freed);
  if (is_cold(p)) {
    cold_bytes_ -= freed;
    cold_halvings_++;
  } else {
    reclaimable_ -= freed;
  }
  queue_next_shrink(p);
  pause.pages++;
  pause.bytes_freed += freed;
  pause.from_bits = std::max(pause.from_bits, top);
  pause.to_bits = pause.to_bits == 0 ? top / 2 : std::min(pause.to_bits, top / 2);
}

void PagedKvCache::charge(SeqState& s, int seq, size_t bytes, const char* what) {
  if (s.held >= bytes) {
    pool_.charge_held(bytes);
    s.held -= bytes;
    return;
  }
  const size_t rest = bytes - s.held;
  if (!make_room(rest, seq)) {
    throw Error("KV budget of " + mib(pool_.budget()) + " exhausted: sequence " + std::to_string(seq) + " needs " +
                std::to_string(rest) + " more bytes for " + what + " (" + mib(pool_.used()) +
                " in use) and no page can shrink further (reserve() first to stop it cleanly)");
  }
  pool_.charge_held(s.held);
  s.held = 0;
  pool_.charge(rest);
}

bool PagedKvCache::reserve(int seq, int n_tokens) {
  MPKV_ASSERT(n_tokens >= 0, "KV reserve: negative token count");
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) {
    pool_.unhold(it->second->held);
    it->second->held = 0;
    // The next positions follow: free what no later query of a sliding-window layer can read
    // before counting room (what attention returns does not change).
    for (int l = 0; l < dims_.n_layer; ++l) {
      LayerState& ls = it->second->layers[l];
      drop_out_of_window(ls, l, ls.n_tokens);
    }
  }
  const size_t need = bytes_needed(seq, n_tokens);
  if (!make_room(need, seq)) return false;
  pool_.hold(need);
  if (it == seqs_.end()) {
    SeqState& s = create_sequence(seq);
    s.held = need;
    charge(s, seq, bytes_.sequence_fixed_bytes(), "its sink and window");
  } else {
    it->second->held = need;
  }
  return true;
}

// ---- storage --------------------------------------------------------------------------------------

PagedKvCache::SeqState& PagedKvCache::create_sequence(int seq) {
  auto s = std::make_unique<SeqState>();
  s->layers.resize(dims_.n_layer);
  const size_t n = (size_t)bytes_.fp16_rows() * dims_.n_head_kv * dims_.head_dim;
  for (LayerState& ls : s->layers) {
    ls.k16.assign(n, 0);
    ls.v16.assign(n, 0);
  }
  return *(seqs_[seq] = std::move(s));
}

PagedKvCache::Page& PagedKvCache::open_page(SeqState& s, int seq, int layer) {
  LayerState& ls = s.layers[layer];
  if (!ls.pages.empty() && ls.pages.back()->filled < plan_.page_tokens) return *ls.pages.back();
  const size_t bytes = bytes_.page_data_bytes(layer, false);
  charge(s, seq, bytes_.new_page_bytes(layer), "a new page");
  auto p = std::make_unique<Page>();
  p->id = next_page_id_++;
  p->seq = seq;
  p->layer = layer;
  p->data = static_cast<uint8_t*>(std::calloc(bytes, 1));
  if (!p->data) {
    pool_.release(bytes_.new_page_bytes(layer));
    throw std::bad_alloc();
  }
  p->bytes = bytes;
  p->cur.resize(n_blocks_);
  p->fin.resize(n_blocks_);
  for (int b = 0; b < n_blocks_; ++b) {
    p->cur[b] = (uint8_t)bytes_.initial_bits(layer, b);
    p->fin[b] = (uint8_t)bytes_.final_bits(layer, b);
  }
  Page* raw = p.get();
  pages_by_id_[raw->id] = std::move(p);
  ls.pages.push_back(raw);
  return *raw;
}

void PagedKvCache::page_filled(Page& p) {
  p.full = true;
  queue_next_shrink(p);
  reclaimable_ += p.bytes - page_bytes_final(p);
}

void PagedKvCache::unref_page(Page& p) {
  MPKV_ASSERT(p.refs > 0, "KV cache: page " + std::to_string(p.id) + " released more often than read");
  if (--p.refs == 0 && p.block == nullptr) free_page(p);
}

void PagedKvCache::free_page(Page& p) {
  if (p.full) reclaimable_ -= p.bytes - page_bytes_final(p);
  destroy_page(p);
}

void PagedKvCache::destroy_page(Page& p) {
  pool_.release(p.bytes + bytes_.page_metadata_bytes());
  pool_.forget(p.id);
  std::free(p.data);
  pages_by_id_.erase(p.id);  // deletes p
}

// Moves the k oldest window rows of (seq, layer) into pages (k a multiple of the layer's granularity).
void PagedKvCache::flush(SeqState& s, int seq, int layer, int k) {
  LayerState& ls = s.layers[layer];
  const int d = dims_.head_dim, nkv = dims_.n_head_kv, P = plan_.page_tokens;
  const size_t row = (size_t)nkv * d;
  std::vector<float> x((size_t)P * d);  // [m, d] fp32 rows of one head (the quantizers take fp32)
  for (int done = 0; done < k;) {
    Page& p = open_page(s, seq, layer);
    const int m = std::min(k - done, P - p.filled);
    for (int b = 0; b < n_blocks_; ++b) {
      const Component& c = comp(layer, b);
      const uint16_t* src = (b % 2 == 0 ? ls.k16 : ls.v16).data() + (size_t)(plan_.sink + done) * row + (size_t)(b / 2) * d;
      uint8_t* blk = p.data + block_offset(p, b);
      if (c.fp16) {
        for (int i = 0; i < m; ++i)
          std::memcpy(blk + (size_t)(p.filled + i) * d * 2, src + (size_t)i * row, (size_t)d * 2);
        continue;
      }
      for (int i = 0; i < m; ++i)
        for (int ch = 0; ch < d; ++ch) x[(size_t)i * d + ch] = fp16_to_fp32(src[(size_t)i * row + ch]);
      c.quant->quantize(c.layout_at[p.cur[b]], x.data(), (size_t)d, p.filled, m, blk);
    }
    p.filled += m;
    done += m;
    if (p.filled == P) page_filled(p);
  }
  const size_t keep = (size_t)(ls.win_n - k) * row;
  const size_t at = (size_t)plan_.sink * row;
  std::memmove(ls.k16.data() + at, ls.k16.data() + at + (size_t)k * row, keep * sizeof(uint16_t));
  std::memmove(ls.v16.data() + at, ls.v16.data() + at + (size_t)k * row, keep * sizeof(uint16_t));
  ls.win_n -= k;
}

void PagedKvCache::append(int seq, int layer, int n_tokens, const float* k, const float* v) {
  MPKV_ASSERT(layer >= 0 && layer < dims_.n_layer, "KV append: layer " + std::to_string(layer) + " out of range");
  MPKV_ASSERT(n_tokens >= 0, "KV append: negative token count");
  auto it = seqs_.find(seq);
  SeqState* s;
  if (it == seqs_.end()) {
    const size_t fixed = bytes_.sequence_fixed_bytes();
    if (!make_room(fixed, seq)) {
      throw Error("KV budget of " + mib(pool_.budget()) + " cannot hold another sequence (" + mib(fixed) +
                  " for its sink and window; " + mib(pool_.used()) + " in use)");
    }
    s = &create_sequence(seq);
    pool_.charge(fixed);
  } else {
    s = it->second.get();
  }
  LayerState& ls = s->layers[layer];
  const int first_query = ls.n_tokens;  // the earliest position that attends after this append
  drop_out_of_window(ls, layer, first_query);  // before this append charges new pages
  const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim;
  auto put = [&](int buf_row, int i) {
    for (size_t c = 0; c < row; ++c) {
      ls.k16[(size_t)buf_row * row + c] = fp32_to_fp16(k[(size_t)i * row + c]);
      ls.v16[(size_t)buf_row * row + c] = fp32_to_fp16(v[(size_t)i * row + c]);
    }
  };
  int i = 0;
  for (; i < n_tokens && ls.sink_n < plan_.sink; ++i) {
    put(ls.sink_n++, i);
    ls.n_tokens++;
  }
  const int R = plan_.window, g = bytes_.flush_granularity(layer), cap = plan_.window + plan_.page_tokens;
  while (i < n_tokens) {
    const int m = std::min(n_tokens - i, cap - ls.win_n);
    for (int r = 0; r < m; ++r) put(plan_.sink + ls.win_n + r, i + r);
    ls.win_n += m;
    ls.n_tokens += m;
    i += m;
    // Keep the window in [R, R + g): flush its oldest whole groups.
    if (ls.win_n > R) {
      const int kf = (ls.win_n - R) / g * g;
      if (kf > 0) flush(*s, seq, layer, kf);
    }
  }
  drop_out_of_window(ls, layer, first_query);
}

// A sliding-window layer's query at p sees positions >= p - W + 1, and every later query sits at
// first_query or after: full pages wholly before first_query - W + 1 are never read again, so they
// are freed (their bytes go back to the pool, crediting the budget). The open page is kept.
// Called by reserve() and at both ends of append() (at the end: pages this append filled).
void PagedKvCache::drop_out_of_window(LayerState& ls, int layer, int first_query) {
  const int W = dims_.window_of(layer);
  if (W == 0) return;
  const int keep_from = window_start(W, first_query);
  size_t n = 0;
  while (n < ls.pages.size() && ls.pages[n]->full && ls.sink_n + ls.dropped + ls.pages[n]->filled <= keep_from) {
    ls.dropped += ls.pages[n]->filled;
    unref_page(*ls.pages[n]);
    ++n;
  }
  ls.pages.erase(ls.pages.begin(), ls.pages.begin() + n);
}

void PagedKvCache::remove(int seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& s = *it->second;
  for (LayerState& ls : s.layers)
    for (Page* p : ls.pages) unref_page(*p);
  for (size_t i = s.blocks.size(); i-- > 0;) release_block(*s.blocks[i], s.reads[i]);
  pool_.unhold(s.held);
  pool_.release(bytes_.sequence_fixed_bytes());
  seqs_.erase(it);
}

const PagedKvCache::SeqState& PagedKvCache::seq_state(int seq) const {
  auto it = seqs_.find(seq);
  MPKV_ASSERT(it != seqs_.end(), "KV cache: unknown sequence " + std::to_string(seq));
  return *it->second;
}

int PagedKvCache::length(int seq, int layer) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second->layers[layer].n_tokens;
}

// ---- reporting ------------------------------------------------------------------------------------

std::map<int, size_t> PagedKvCache::bits_histogram() const {
  std::map<int, size_t> h;
  for (const auto& [id, p] : pages_by_id_)
    for (int b = 0; b < n_blocks_; ++b) h[p->cur[b]]++;
  return h;
}

std::string PagedKvCache::stats() const {
  std::ostringstream o;
  o << "kv " << kv_plan_method_name(plan_.method) << (plan_.progressive ? " (progressive)" : "") << ": " << mib(pool_.used()) << " in use";
  if (pool_.budget() > 0) o << " of " << mib(pool_.budget()) << " budget";
  o << " (peak " << mib(pool_.peak_used()) << "), " << seqs_.size() << " sequences, " << pages_by_id_.size()
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
  const ShrinkTotals& t = shrink_totals_;
  char buf[200];
  std::snprintf(buf, sizeof buf, "\n  shrinks: %zu pages in %zu pauses, %.2f ms total, longest pause %.3f ms, %s freed",
                t.page_shrinks, t.pauses, 1e3 * t.seconds, 1e3 * t.max_pause_seconds, mib(t.bytes_freed).c_str());
  o << buf;
  if (prefix_) {
    const PrefixCacheStats p = prefix_stats();
    std::snprintf(buf, sizeof buf, "\n  prefix cache: %zu blocks (%zu cold, %s), %llu evicted, %llu cold halvings",
                  p.blocks, p.cold_blocks, mib(p.cold_bytes).c_str(), (unsigned long long)p.evictions,
                  (unsigned long long)p.cold_halvings);
    o << buf;
  }
  return o.str();
}

int PagedKvCache::n_pages(int seq, int layer) const { return (int)seq_state(seq).layers.at(layer).pages.size(); }

int PagedKvCache::page_current_bits(int seq, int layer, int page, int block) const {
  return seq_state(seq).layers.at(layer).pages.at(page)->cur.at(block);
}

int PagedKvCache::page_final_bits(int seq, int layer, int page, int block) const {
  return seq_state(seq).layers.at(layer).pages.at(page)->fin.at(block);
}

const uint8_t* PagedKvCache::page_block(int seq, int layer, int page, int block, KvBlockLayout* layout) const {
  const Page& p = *seq_state(seq).layers.at(layer).pages.at(page);
  const Component& c = comp(layer, block);
  MPKV_CHECK(!c.fp16, "KV cache: block " + std::to_string(block) + " is stored as fp16 rows");
  if (layout) *layout = c.layout_at[p.cur.at(block)];
  return p.data + block_offset(p, block);
}

}  // namespace mpkv

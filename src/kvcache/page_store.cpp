#include "kvcache/page_store.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "quant/lloyd_max.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {

namespace {
// Every epoch value of the process (page_store.h: epoch()), so that a store created where another
// one was destroyed never repeats that one's values.
uint64_t next_epoch() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}
}  // namespace

void PageStore::bump_epoch() { epoch_ = next_epoch(); }

PageStore::PageStore(const KvDims& dims, const KvPlan& plan, const KvByteModel& bytes)
    : dims_(dims), plan_(plan), bytes_(bytes), n_blocks_(bytes.blocks_per_page()), epoch_(next_epoch()) {
  // The record constants bound the structs; the rest of each covers their container nodes
  // (page: table slot, id-map node, shrink queue set + map nodes, about 64 bytes each).
  static_assert(sizeof(KvPage) + sizeof(void*) <= kPageRecordBytes - 3 * 64, "page record");
  static_assert(sizeof(KvLayerState) <= kLayerRecordBytes, "layer record");
  static_assert(sizeof(KvSeqState) + 64 <= kSequenceRecordBytes, "sequence record");
  comps_.resize((size_t)dims.n_layer * n_blocks_);
  for (int l = 0; l < dims.n_layer; ++l) {
    for (int b = 0; b < n_blocks_; ++b) {
      const KvRole role = b % 2 == 0 ? KvRole::key : KvRole::value;
      const KvComponentPlan& cp = plan_.at(l, b / 2, role);
      KvComponent& c = comps_[(size_t)l * n_blocks_ + b];
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

PageStore::~PageStore() {
  for (auto& [id, p] : pages_by_id_) std::free(p->data);
}

size_t PageStore::block_offset(const KvPage& p, int block) const {
  size_t off = 0;
  for (int b = 0; b < block; ++b) off += block_bytes(p.layer, b, p.cur[b]);
  return off;
}

size_t PageStore::page_bytes_final(const KvPage& p) const {
  size_t b = 0;
  for (int i = 0; i < n_blocks_; ++i) b += block_bytes(p.layer, i, p.fin[i]);
  return b;
}

// ---- sequences ------------------------------------------------------------------------------------

KvSeqState& PageStore::create_sequence(int seq) {
  auto s = std::make_unique<KvSeqState>();
  s->layers.resize(dims_.n_layer);
  for (int l = 0; l < dims_.n_layer; ++l) {
    const size_t n = (size_t)bytes_.fp16_rows(l) * dims_.n_head_kv * dims_.head_dim;
    s->layers[l].k16.assign(n, 0);
    s->layers[l].v16.assign(n, 0);
  }
  return *(seqs_[seq] = std::move(s));
}

KvSeqState* PageStore::find(int seq) {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : it->second.get();
}

const KvSeqState* PageStore::find(int seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : it->second.get();
}

const KvSeqState& PageStore::seq(int seq) const {
  const KvSeqState* s = find(seq);
  MPKV_ASSERT(s != nullptr, "KV cache: unknown sequence " + std::to_string(seq));
  return *s;
}

void PageStore::erase_sequence(int seq) {
  seqs_.erase(seq);
  bump_epoch();
}

// ---- pages ----------------------------------------------------------------------------------------

KvPage* PageStore::open_page(KvLayerState& ls) {
  return !ls.pages.empty() && ls.pages.back()->filled < plan_.page_tokens ? ls.pages.back() : nullptr;
}

KvPage& PageStore::new_page(KvLayerState& ls, int seq, int layer) {
  const size_t bytes = bytes_.page_data_bytes(layer, false);
  auto p = std::make_unique<KvPage>();
  p->data = static_cast<uint8_t*>(std::calloc(bytes, 1));
  if (!p->data) throw std::bad_alloc();
  p->id = next_page_id_++;
  p->seq = seq;
  p->layer = layer;
  p->bytes = bytes;
  p->cur.resize(n_blocks_);
  p->fin.resize(n_blocks_);
  for (int b = 0; b < n_blocks_; ++b) {
    p->cur[b] = (uint8_t)bytes_.initial_bits(layer, b);
    p->fin[b] = (uint8_t)bytes_.final_bits(layer, b);
  }
  KvPage* raw = p.get();
  pages_by_id_[raw->id] = std::move(p);
  ls.pages.push_back(raw);
  return *raw;
}

bool PageStore::has_page(uint64_t id, const KvPage* p) const {
  auto it = pages_by_id_.find(id);
  return it != pages_by_id_.end() && it->second.get() == p;
}

void PageStore::destroy_page(KvPage& p) {
  bump_epoch();
  std::free(p.data);
  pages_by_id_.erase(p.id);  // deletes p
}

// ---- rows -----------------------------------------------------------------------------------------

void PageStore::put_row(KvLayerState& ls, int r, const float* k, const float* v, int i) const {
  const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim;
  for (size_t c = 0; c < row; ++c) {
    ls.k16[(size_t)r * row + c] = fp32_to_fp16(k[(size_t)i * row + c]);
    ls.v16[(size_t)r * row + c] = fp32_to_fp16(v[(size_t)i * row + c]);
  }
}

void PageStore::write_window_rows(const KvLayerState& ls, int first, int m, KvPage& p) const {
  const int d = dims_.head_dim;
  const size_t row = (size_t)dims_.n_head_kv * d;
  thread_local std::vector<float> x;  // [m, d] fp32 rows of one head (the quantizers take fp32)
  x.resize((size_t)m * d);
  for (int b = 0; b < n_blocks_; ++b) {
    const KvComponent& c = comp(p.layer, b);
    const uint16_t* src = (b % 2 == 0 ? ls.k16 : ls.v16).data() + (size_t)(plan_.sink + first) * row + (size_t)(b / 2) * d;
    uint8_t* blk = p.data + block_offset(p, b);
    if (c.fp16) {
      for (int i = 0; i < m; ++i) std::memcpy(blk + (size_t)(p.filled + i) * d * 2, src + (size_t)i * row, (size_t)d * 2);
      continue;
    }
    for (int i = 0; i < m; ++i)
      for (int ch = 0; ch < d; ++ch) x[(size_t)i * d + ch] = fp16_to_fp32(src[(size_t)i * row + ch]);
    c.quant->quantize(c.layout_at[p.cur[b]], x.data(), (size_t)d, p.filled, m, blk);
  }
  p.filled += m;
}

void PageStore::pop_window_rows(KvLayerState& ls, int k) const {
  const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim;
  const size_t keep = (size_t)(ls.win_n - k) * row;
  const size_t at = (size_t)plan_.sink * row;
  std::memmove(ls.k16.data() + at, ls.k16.data() + at + (size_t)k * row, keep * sizeof(uint16_t));
  std::memmove(ls.v16.data() + at, ls.v16.data() + at + (size_t)k * row, keep * sizeof(uint16_t));
  ls.win_n -= k;
}

void PageStore::open_stage(KvLayerState& ls, int tokens) const {
  const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim;
  ls.stage = std::make_unique<KvStage>();
  ls.stage->pos0 = std::max(ls.n_tokens - ls.win_n, plan_.sink);  // a sink still filling: the window starts after it
  ls.stage->tokens = tokens;
  // Sized once for the whole append: the rows the window holds now and every row it may receive.
  const size_t rows = (size_t)ls.win_n + tokens;
  ls.stage->k16.reserve(rows * row);
  ls.stage->v16.reserve(rows * row);
  stage_window_rows(ls, 0, ls.win_n);
}

void PageStore::stage_window_rows(KvLayerState& ls, int first, int m) const {
  MPKV_ASSERT(ls.stage != nullptr, "KV stage: rows staged with no stage open");
  const size_t row = (size_t)dims_.n_head_kv * dims_.head_dim;
  const size_t at = (size_t)(plan_.sink + first) * row, n = (size_t)m * row;
  ls.stage->k16.insert(ls.stage->k16.end(), ls.k16.begin() + at, ls.k16.begin() + at + n);
  ls.stage->v16.insert(ls.stage->v16.end(), ls.v16.begin() + at, ls.v16.begin() + at + n);
}

int PageStore::fp16_from(int layer, int base, int pos) const {
  if (pos < plan_.sink) return pos + 1;
  const int R = bytes_.window(layer), g = bytes_.flush_granularity(layer);
  const int over = pos + 1 - base - R;  // rows past the window's R
  return over < g ? base : base + over / g * g;
}

// A sliding-window layer's query at p sees positions >= p - W + 1, and every later query sits at
// first_query or after: full pages wholly before first_query - W + 1 are never read again.
size_t PageStore::pages_before_window(const KvLayerState& ls, int layer, int first_query) const {
  const int W = dims_.window_of(layer);
  if (W == 0) return 0;
  const int keep_from = window_start(W, first_query);
  size_t n = 0;
  int end = ls.sink_n + ls.dropped;
  while (n < ls.pages.size() && ls.pages[n]->full && end + ls.pages[n]->filled <= keep_from) end += ls.pages[n++]->filled;
  return n;
}

size_t PageStore::rewrite_page(KvPage& p, const std::vector<uint8_t>& to_bits) {
  bump_epoch();
  size_t new_bytes = 0;
  for (int b = 0; b < n_blocks_; ++b) new_bytes += block_bytes(p.layer, b, to_bits[b]);
  // Through a scratch copy (shrink kernels need distinct source and destination), then the page
  // is reallocated in place to its new size: no second copy of the page stays live.
  std::vector<uint8_t> scratch(new_bytes);
  size_t src = 0, dst = 0;
  for (int b = 0; b < n_blocks_; ++b) {
    const size_t sb = block_bytes(p.layer, b, p.cur[b]), db = block_bytes(p.layer, b, to_bits[b]);
    if (to_bits[b] != p.cur[b]) {
      const KvComponent& c = comp(p.layer, b);
      shrink_block(c.layout_at[p.cur[b]], p.data + src, c.layout_at[to_bits[b]], scratch.data() + dst);
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
  p.cur = to_bits;
  return freed;
}

KvReadBytes PageStore::read_bytes(int seq_id) const {
  KvReadBytes r;
  size_t by_bits[17] = {};  // summed here, not in the map: the engine counts this every decode step
  const size_t fp16_row = (size_t)dims_.n_head_kv * dims_.head_dim * 2 * sizeof(uint16_t);  // K and V
  const size_t P = (size_t)plan_.page_tokens;
  for (int l = 0; l < dims_.n_layer; ++l) {
    const KvLayerState& ls = seq(seq_id).layers[l];
    r.fp16_rows += (size_t)(ls.sink_n + ls.win_n) * fp16_row;
    // The open page is read only over its filled rows: its share of the page's bytes at each
    // width (exact for fp16 blocks; a partly filled quantized block is counted in proportion). A
    // page whose blocks share one width (the usual case) adds its data bytes in one go.
    for (const KvPage* p : ls.pages) {
      const size_t filled = (size_t)p->filled;
      const uint8_t* cur = p->cur.data();
      if (std::all_of(cur, cur + n_blocks_, [&](uint8_t c) { return c == cur[0]; })) {
        by_bits[cur[0]] += filled == P ? p->bytes : p->bytes * filled / P;
        continue;
      }
      size_t at[17] = {};
      for (int b = 0; b < n_blocks_; ++b) at[cur[b]] += block_bytes(l, b, cur[b]);
      for (int bits = 0; bits <= 16; ++bits) by_bits[bits] += at[bits] * filled / P;
    }
  }
  for (int bits = 0; bits <= 16; ++bits)
    if (by_bits[bits] > 0) r.pages_by_bits[bits] = by_bits[bits];
  return r;
}

std::map<int, size_t> PageStore::bits_histogram() const {
  std::map<int, size_t> h;
  for (const auto& [id, p] : pages_by_id_)
    for (int b = 0; b < n_blocks_; ++b) h[p->cur[b]]++;
  return h;
}

}  // namespace mpkv

#include "kvcache/kv_byte_model.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "quant/kv_block_layout.h"
#include "util/error.h"

namespace mpkv {

namespace {
// The layout a component's pages have at `bits` (the same codec, axis and group KvQuantizer
// uses; PageStore asserts that its quantizers' layouts have these bytes).
KvBlockLayout layout_at(const KvPlan& plan, const KvComponentPlan& c, KvRole role, int bits) {
  const QuantOptions o = component_quant_options(plan, c, role, bits);
  const Codec codec = o.method == QuantMethod::turbo ? Codec::lloyd_max : Codec::uniform;
  const GroupAxis axis = groups_along_tokens(o) ? GroupAxis::channel : GroupAxis::token;
  return make_kv_block_layout(codec, axis, bits, o.head_dim, plan.page_tokens, effective_group(o));
}
}  // namespace

KvByteModel::KvByteModel(const KvDims& dims, const KvPlan& plan)
    : dims_(dims), P_(plan.page_tokens), sink_(plan.sink), n_blocks_(dims.n_head_kv * 2) {
  MPKV_CHECK(dims.n_layer > 0 && dims.n_head_kv > 0 && dims.n_head % dims.n_head_kv == 0,
             "paged KV cache: n_head must be a positive multiple of n_head_kv");
  validate(plan, dims);
  gran_.assign(dims.n_layer, 1);
  window_.resize(dims.n_layer);
  for (int l = 0; l < dims.n_layer; ++l) window_[l] = plan.fp16_window(l);
  blocks_.resize((size_t)dims.n_layer * n_blocks_);
  for (int l = 0; l < dims.n_layer; ++l) {
    for (int b = 0; b < n_blocks_; ++b) {
      const KvRole role = b % 2 == 0 ? KvRole::key : KvRole::value;
      const KvComponentPlan& cp = plan.at(l, b / 2, role);
      Block& k = blocks_[(size_t)l * n_blocks_ + b];
      gran_[l] = std::lcm(gran_[l], component_token_granularity(plan, cp, role));
      k.fp16 = cp.fp16;
      if (cp.fp16) {
        k.bytes_at[16] = (size_t)P_ * dims.head_dim * 2;
        continue;
      }
      k.final_bits = cp.bits;
      k.init_bits = plan.progressive ? 16 : cp.bits;
      for (int bits = k.init_bits;; bits /= 2) {  // the ladder: initial bits, then every halving
        k.bytes_at[bits] = layout_at(plan, cp, role, bits).bytes;
        if (bits <= k.final_bits) break;
      }
    }
  }
}

size_t KvByteModel::block_bytes(int layer, int block, int bits) const {
  const Block& k = at(layer, block);
  const size_t b = k.bytes_at[k.fp16 ? 16 : bits];
  MPKV_ASSERT(b > 0, "KV byte model: " + std::to_string(bits) + " bits is not on the block's ladder");
  return b;
}

size_t KvByteModel::sequence_fixed_bytes() const {
  size_t b = kSequenceRecordBytes;
  for (int l = 0; l < dims_.n_layer; ++l)
    b += kLayerRecordBytes + 2 * (size_t)fp16_rows(l) * dims_.n_head_kv * dims_.head_dim * sizeof(uint16_t);
  return b;
}

size_t KvByteModel::prefix_block_record_bytes(int depth) const {
  const int tokens = depth == 0 ? sink_ + P_ : P_;
  const size_t sink = depth == 0 ? 2 * (size_t)sink_ * dims_.n_head_kv * dims_.head_dim * sizeof(uint16_t) : 0;
  return kPrefixBlockRecordBytes + 4 * (size_t)tokens + (size_t)dims_.n_layer * (8 + sink);
}

size_t KvByteModel::prefix_pages_bound(int matched_tokens) const {
  const size_t pages = (size_t)std::max(0, matched_tokens - sink_) / P_;
  size_t b = 0;
  for (int l = 0; l < dims_.n_layer; ++l)
    if (dims_.window_of(l) == 0) b += pages * (page_data_bytes(l, true) + page_metadata_bytes());
  return b;
}

size_t KvByteModel::prefix_records_bound(int n) const {
  const int blocks = std::max(0, n - sink_) / P_;
  size_t b = 0;
  for (int j = 0; j < blocks; ++j) b += prefix_block_record_bytes(j);
  return b;
}

size_t KvByteModel::page_data_bytes(int layer, bool at_final_bits) const {
  size_t b = 0;
  for (int i = 0; i < n_blocks_; ++i) {
    const Block& k = at(layer, i);
    b += block_bytes(layer, i, at_final_bits ? k.final_bits : k.init_bits);
  }
  return b;
}

int KvByteModel::tokens_in_pages(int layer, int n) const {
  const int body = std::max(0, n - sink_);
  const int g = gran_[layer];
  const int R = window_[layer];
  return body > R ? (body - R) / g * g : 0;
}

int KvByteModel::pages_opened(int layer, const KvLayerFill& before, int n) const {
  const int to_sink = std::clamp(sink_ - before.n_tokens, 0, n);
  const int w = before.window_rows + n - to_sink;
  // Flushes keep the window in [R, R + g) once it reaches R (PagedKvCache::append); they move this many.
  const int R = window_[layer];
  const int flushed = w > R ? (w - R) / gran_[layer] * gran_[layer] : 0;
  return flushed > before.open_page_free ? (flushed - before.open_page_free + P_ - 1) / P_ : 0;
}

size_t KvByteModel::pages_bound(int layer, int n) const {
  return std::min((size_t)(tokens_in_pages(layer, n) + P_ - 1) / P_, window_pages_bound(layer));
}

// A sliding-window layer's live pages (docs/gemma3.md, "Admission"). While token p is appended,
// the pages left are those not wholly before a = window_start(W, p) - sink (freed by reserve()
// and at the start of append(), both with first query p), up to the F <= p + 1 - sink - R tokens
// flushed so far; F - a <= W - R, so they number at most
//   ceil(F / P) - floor(a / P) <= ceil((W - R + P - 1) / P)
// (the worst case a = P - 1 mod P, reached by every long enough sequence when the layer flushes
// token by token), and at least the open page.
size_t KvByteModel::window_pages_bound(int layer) const {
  const int W = dims_.window_of(layer);
  if (W == 0) return SIZE_MAX;
  const int span = W - window_[layer] + P_ - 1;  // ceil(span / P) pages; at least the open one
  return span <= P_ ? 1 : (size_t)((span + P_ - 1) / P_);
}

size_t KvByteModel::overhead_bytes_bound(int n) const {
  size_t b = sequence_fixed_bytes();
  for (int l = 0; l < dims_.n_layer; ++l) b += pages_bound(l, n) * page_metadata_bytes();
  return b;
}

size_t KvByteModel::block_bytes_bound(int layer, int block, int n) const {
  const size_t pages = pages_bound(layer, n);
  if (pages == 0) return 0;
  const Block& k = at(layer, block);
  return (pages - 1) * block_bytes(layer, block, k.final_bits) + block_bytes(layer, block, k.init_bits);
}

size_t KvByteModel::sequence_bytes_bound(int n) const {
  size_t b = overhead_bytes_bound(n);
  for (int l = 0; l < dims_.n_layer; ++l)
    for (int i = 0; i < n_blocks_; ++i) b += block_bytes_bound(l, i, n);
  return b;
}

// After the append of position n - 1 (its first query), a sliding-window layer has freed the full
// pages wholly before window_start(W, n - 1) (PagedKvCache::drop_out_of_window).
int KvByteModel::live_pages(int layer, int n, int* full) const {
  const int in_pages = tokens_in_pages(layer, n);
  const int pages = (in_pages + P_ - 1) / P_, n_full = in_pages / P_;
  int dropped = 0;
  if (const int W = dims_.window_of(layer); W > 0 && n > 0) {
    const int body_before = window_start(W, n - 1) - std::min(n, sink_);
    dropped = body_before > 0 ? std::min(n_full, body_before / P_) : 0;
  }
  if (full) *full = n_full - dropped;
  return pages - dropped;
}

size_t KvByteModel::sequence_bytes(int n, bool full_pages_at_final_bits) const {
  size_t b = sequence_fixed_bytes();
  for (int l = 0; l < dims_.n_layer; ++l) {
    int full = 0;
    const int pages = live_pages(l, n, &full);
    b += (size_t)pages * page_metadata_bytes() + (size_t)full * page_data_bytes(l, full_pages_at_final_bits) +
         (size_t)(pages - full) * page_data_bytes(l, false);
  }
  return b;
}

size_t KvByteModel::min_budget_bytes() const {
  size_t b = sequence_fixed_bytes();
  for (int l = 0; l < dims_.n_layer; ++l) b += page_data_bytes(l, true) + page_metadata_bytes();
  return b;
}

}  // namespace mpkv

#include "engine/step_work.h"

#include <algorithm>

#include "kvcache/paged_kv_cache.h"

namespace mpkv {

namespace {

// f over the matrices a forward call multiplies: the output head and every layer's seven.
template <class F>
uint64_t sum_matrices(const ModelWeights& mw, F f) {
  uint64_t s = f(mw.output);
  for (const LayerWeights& l : mw.layers)
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) s += f(*m);
  return s;
}

}  // namespace

uint64_t StepWork::kv_bytes() const {
  uint64_t s = kv_fp16_row_bytes;
  for (const auto& [bits, bytes] : kv_page_bytes_by_bits) s += bytes;
  return s;
}

std::map<int, uint64_t> StepWork::kv_bytes_by_bits_with_rows() const {
  std::map<int, uint64_t> m = kv_page_bytes_by_bits;
  if (kv_fp16_row_bytes > 0) m[16] += kv_fp16_row_bytes;
  return m;
}

StepWork& StepWork::operator+=(const StepWork& o) {
  weight_bytes += o.weight_bytes;
  for (const auto& [bits, bytes] : o.kv_page_bytes_by_bits) kv_page_bytes_by_bits[bits] += bytes;
  kv_fp16_row_bytes += o.kv_fp16_row_bytes;
  macs += o.macs;
  return *this;
}

WeightWork weight_work(const Model& model) {
  WeightWork w;
  w.bytes = sum_matrices(model.weights(), [](const WeightMatrix& m) { return (uint64_t)m.rows * (uint64_t)m.row_bytes; });
  w.macs_per_token = sum_matrices(model.weights(), [](const WeightMatrix& m) { return (uint64_t)m.rows * (uint64_t)m.cols; });
  return w;
}

uint64_t attention_macs(const KvDims& d, int pos) {
  uint64_t macs = 0;
  for (int l = 0; l < d.n_layer; ++l) {
    const int window = d.window_of(l);
    const int rows = window > 0 ? std::min(window, pos + 1) : pos + 1;
    macs += (uint64_t)d.n_head * (uint64_t)rows * (uint64_t)d.head_dim * 2;  // scores and weighted values
  }
  return macs;
}

void add_kv_read(StepWork& w, const PagedKvCache& cache, int seq) {
  const KvReadBytes r = cache.read_bytes(seq);
  for (const auto& [bits, bytes] : r.pages_by_bits) w.kv_page_bytes_by_bits[bits] += bytes;
  w.kv_fp16_row_bytes += r.fp16_rows;
}

StepWork decode_call_work(const WeightWork& weights, const PagedKvCache& cache, const std::vector<DecodeToken>& tokens) {
  StepWork w;
  w.weight_bytes = weights.bytes;
  const KvDims& dims = cache.dims();
  for (const DecodeToken& t : tokens) {
    w.macs += weights.macs_per_token + attention_macs(dims, t.pos);
    add_kv_read(w, cache, t.seq);
  }
  return w;
}

}  // namespace mpkv

// The interface between the forward pass and a KV cache.
//
// The forward pass hands the cache post-RoPE keys and values and asks it for attention outputs;
// the cache owns both storage and attention, so a quantized cache can attend over its packed
// pages directly (no dequantized copy). Shapes, all row-major float32:
//   k, v:  [n_tokens, n_head_kv, head_dim]
//   q, out:[n_tokens, n_head,    head_dim]
// Query head h reads KV head h / (n_head / n_head_kv) (grouped-query attention).
// Freeing a sequence and reserving room under a budget before a pass are not the forward pass's
// business: a budgeted cache also implements kvcache/KvMemory (kv_memory.h), which declares them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace mpkv {

// One sequence's rows in a batch: rows [row0, row0 + n_tokens) of q / out are the last n_tokens
// positions appended to (seq, layer).
struct AttendSpan {
  int seq = 0;
  int row0 = 0;
  int n_tokens = 0;
};

struct KvDims {
  KvDims() = default;
  KvDims(int n_layer_, int n_head_, int n_head_kv_, int head_dim_, std::vector<int> window_ = {})
      : n_layer(n_layer_), n_head(n_head_), n_head_kv(n_head_kv_), head_dim(head_dim_), window(std::move(window_)) {}

  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  // Per layer: its sliding window W (a query at position p sees cache positions
  // [max(0, p - W + 1), p]), 0 for a global layer. Empty: every layer is global.
  std::vector<int> window;

  int window_of(int layer) const { return window.empty() ? 0 : window[layer]; }
};

// The first cache position a query at `pos` sees in a layer with sliding window W (0: global).
inline int window_start(int window, int pos) { return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0; }

class KvCache {
 public:
  virtual ~KvCache() = default;

  const KvDims& dims() const { return dims_; }

  // Appends the K/V of the next n_tokens positions of `seq` in `layer`. A sequence is created on
  // its first append; appends of one sequence arrive layer by layer in order of position.
  virtual void append(int seq, int layer, int n_tokens, const float* k, const float* v) = 0;

  // Causal attention for the last n_tokens appended to (seq, layer): query i, at position
  // p = length - n_tokens + i, sees cache positions [window_start(dims().window_of(layer), p), p].
  // Scores are scaled by 1/sqrt(head_dim).
  virtual void attend(int seq, int layer, int n_tokens, const float* q, float* out) = 0;

  // attend() for every span of one layer's batch; q, out: [rows, n_head, head_dim]. The forward
  // pass calls this once per layer after appending every span's K/V. The default loops over
  // attend(); a cache may run all spans in one parallel region (PagedKvCache does).
  virtual void attend_batch(int layer, const std::vector<AttendSpan>& spans, const float* q, float* out) {
    const size_t row = (size_t)dims_.n_head * dims_.head_dim;
    for (const AttendSpan& s : spans) attend(s.seq, layer, s.n_tokens, q + s.row0 * row, out + s.row0 * row);
  }

  // Tokens held for (seq, layer); 0 for an unknown sequence.
  virtual int length(int seq, int layer) const = 0;

  // Key smoothing the forward pass must apply for this cache's plan (q *= lambda, k /= lambda before
  // RoPE, [n_layer][n_head_kv * head_dim]; Forward::set_qk_smoothing); null or empty: none.
  // engine/ModelRunner hands it to the forward pass of every run through a cache (calibration's
  // calib/kv_collector applies the smoothing it is computing directly).
  virtual const std::vector<std::vector<float>>* key_smoothing() const { return nullptr; }

  // A short multi-line report of memory use for --verbose; empty when there is nothing to say.
  virtual std::string stats() const { return {}; }

 protected:
  // Dims come from ModelConfig::kv_dims() or a test: a wrong window list is a bug, not input.
  explicit KvCache(KvDims d) : dims_(std::move(d)) {
    MPKV_ASSERT(dims_.window.empty() || (int)dims_.window.size() == dims_.n_layer,
                "KvDims lists " + std::to_string(dims_.window.size()) + " windows for " + std::to_string(dims_.n_layer) + " layers");
    for (int w : dims_.window) MPKV_ASSERT(w >= 0, "KvDims: negative sliding window");
  }
  KvDims dims_;
};

}  // namespace mpkv

// The "prefill-fake" protocol's cache (docs/algorithms.md §9; the papers' perplexity harness): keys and
// values are quantized and immediately dequantized as they are appended (each component of the
// plan at its FINAL bits with its quantizer), then held and attended as fp16 rows by an
// F16KvCache. Nothing here is packed and nothing shrinks: it answers "what does this quantizer cost
// in one teacher-forced pass", not "what does a generated token see" (that is the decode protocol,
// eval_decode.h, through the real PagedKvCache).
//
// Kept unquantized, as stated in the results: the plan's sink tokens (the first `sink` positions)
// and, for KIVI keys (one scale per channel per group of G tokens, groups aligned at sink + kG),
// a group not complete within one append (the last partial group of a window in a one-pass
// prefill: KIVI's residual). There is no recent-token window: the whole body is quantized, as in
// the papers' harness. Progressive plans are quantized directly at their final bits.
#pragma once
#include <memory>
#include <vector>

#include "kvcache/f16_kv_cache.h"
#include "kvcache/kv_plan.h"
#include "quant/kv_quantizer.h"

namespace mpkv {

// True when caches built from a and b compute the same thing: everything FakeQuantKvCache reads
// (the sink, the key smoothing, and each component's fp16 flag, quantizer, final bits and group)
// is equal. What only the real cache reads (window, pages, progressive, shrink costs) is ignored,
// so e.g. progressive-b and uniform-b are the same fake-quant cache. The evaluator runs such plans once.
bool same_fake_quant_cache(const KvPlan& a, const KvPlan& b);

// One quantizer per plan component at its final bits, [n_layer][n_head_kv][2] (0 = key), null for
// fp16 components (shared with RuntimeFakeQuantKvCache).
std::vector<std::unique_ptr<KvQuantizer>> component_quantizers(const KvPlan& plan, const KvDims& dims);

class FakeQuantKvCache final : public KvCache {
 public:
  // The plan is validated against dims (Error on a mismatch).
  FakeQuantKvCache(KvDims dims, const KvPlan& plan);
  const std::vector<std::vector<float>>* key_smoothing() const override { return &plan_.smoothing; }

  void append(int seq, int layer, int n_tokens, const float* k, const float* v) override;
  void attend(int seq, int layer, int n_tokens, const float* q, float* out) override { inner_.attend(seq, layer, n_tokens, q, out); }
  int length(int seq, int layer) const override { return inner_.length(seq, layer); }

 private:
  // rows [n, n_head_kv * head_dim]: the tokens at positions [p0, p0 + n) of one role, in place.
  void fake_quantize(int layer, KvRole role, int p0, int n, float* rows);

  KvPlan plan_;
  F16KvCache inner_;
  std::vector<std::unique_ptr<KvQuantizer>> quant_;  // [n_layer][n_head_kv][2]; null = fp16
  std::vector<float> k_, v_, in_, out_;
};

}  // namespace mpkv

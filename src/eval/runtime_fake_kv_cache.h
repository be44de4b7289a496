// A teacher-forced cache that quantizes exactly the (query, key) pairs the runtime does
// (docs/calibration.md, "What the runtime quantizes"): the query at position p sees fp16 keys and
// values for the sink and its fp16 window, and quantized-then-dequantized rows for
// [sink, sink + tokens_in_pages(layer, p + 1)) (the paged cache's rule, kv_byte_model.h: window, flush granularity).
// So one prefill pass gives what token-by-token decoding through a PagedKvCache with the same
// fixed-width plan computes, up to the fp16 rounding of the dequantized rows and the int8 query
// paths of the paged kernels; it is how `mpkv distortion --check` measures single-component drops
// (about 30x faster than decoding). Progressive plans are quantized directly at their final bits.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kvcache/kv_byte_model.h"
#include "kvcache/kv_plan.h"
#include "model/kv_cache.h"
#include "quant/kv_quantizer.h"

namespace mpkv {

class RuntimeFakeQuantKvCache final : public KvCache {
 public:
  // The plan is validated against dims (Error on a mismatch).
  RuntimeFakeQuantKvCache(KvDims dims, const KvPlan& plan);
  ~RuntimeFakeQuantKvCache() override;
  const std::vector<std::vector<float>>* key_smoothing() const override { return &plan_.smoothing; }

  void append(int seq, int layer, int n_tokens, const float* k, const float* v) override;
  void attend(int seq, int layer, int n_tokens, const float* q, float* out) override;
  int length(int seq, int layer) const override;

  // Keys [sink, end) of `layer` held quantized when the query at position p attends.
  int quantized_end(int layer, int p) const;

 private:
  // Rows [n_tokens, n_head_kv, head_dim] as fp16 bits: as appended, and quantized + dequantized
  // (valid for [sink, n_quantized)).
  struct LayerStore {
    std::vector<uint16_t> k, v, kq, vq;
    int n_tokens = 0, n_quantized = 0;
  };
  void quantize_rows(LayerStore& s, int layer, int end);

  KvPlan plan_;
  KvByteModel rule_;                                 // tokens_in_pages
  std::vector<std::unique_ptr<KvQuantizer>> quant_;  // [n_layer][n_head_kv][2]; null = fp16
  std::map<int, std::vector<LayerStore>> seqs_;
};

}  // namespace mpkv

// The plain 16-bit KV cache: fp16 keys and values, one growing buffer per (sequence, layer).
// The reference against which every quantized cache is measured.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "model/kv_cache.h"

namespace mpkv {

class F16KvCache final : public KvCache {
 public:
  explicit F16KvCache(KvDims dims);

  void append(int seq, int layer, int n_tokens, const float* k, const float* v) override;
  void attend(int seq, int layer, int n_tokens, const float* q, float* out) override;
  int length(int seq, int layer) const override;

  // Bytes held by all sequences (K and V codes only; there is no other state).
  size_t bytes_used() const;

 private:
  // [n_tokens, n_head_kv, head_dim] fp16 bits, row-major, for K and V.
  struct LayerStore {
    std::vector<uint16_t> k, v;
    int n_tokens = 0;
  };
  std::map<int, std::vector<LayerStore>> seqs_;
};

}  // namespace mpkv

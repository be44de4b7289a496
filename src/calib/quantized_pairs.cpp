#include "calib/quantized_pairs.h"

#include "kvcache/paged_kv_cache.h"

namespace mpkv::calib {

QuantizedPairs::QuantizedPairs(const KvPlan& plan) : cache_(std::make_unique<PagedKvCache>(plan.dims, plan, 0)) {}
QuantizedPairs::~QuantizedPairs() = default;
QuantizedPairs::QuantizedPairs(QuantizedPairs&&) noexcept = default;

int QuantizedPairs::sink() const { return cache_->plan().sink; }

void QuantizedPairs::keys(int layer, int t, int& k0, int& k1) const {
  k0 = sink();
  k1 = k0 + cache_->tokens_in_pages(layer, t + 1);
}

QuantizedKeyRange QuantizedPairs::range() const {
  return [this](int layer, int t, int& k0, int& k1) { keys(layer, t, k0, k1); };
}

}  // namespace mpkv::calib

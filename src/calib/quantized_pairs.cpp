#include "calib/quantized_pairs.h"

namespace mpkv::calib {

QuantizedPairs::QuantizedPairs(const KvPlan& plan) : sink_(plan.sink), bytes_(plan.dims, plan) {}

int QuantizedPairs::sink() const { return sink_; }

void QuantizedPairs::keys(int layer, int t, int& k0, int& k1) const {
  k0 = sink();
  k1 = k0 + bytes_.tokens_in_pages(layer, t + 1);
}

QuantizedKeyRange QuantizedPairs::range() const {
  return [this](int layer, int t, int& k0, int& k1) { keys(layer, t, k0, k1); };
}

}  // namespace mpkv::calib

// What the KV cache quantizes (docs/calibration.md, "What the runtime quantizes"): the positions and
// (query, key) pairs whose key and value a PagedKvCache with a given plan holds in quantized pages.
// For a query at position t the sequence holds n = t + 1 positions; the keys in pages are
// [sink, sink + tokens_in_pages(layer, n)) (KvByteModel::tokens_in_pages: the fp16 window of the
// most recent tokens and the layer's flush granularity, e.g. KIVI's key token group). The sink and
// the window are fp16, so their pairs contribute nothing to a quantization error.
#pragma once
#include <memory>

#include "calib/activation_backward.h"
#include "kvcache/kv_byte_model.h"
#include "kvcache/kv_plan.h"

namespace mpkv::calib {

class QuantizedPairs {
 public:
  // The plan is validated against its own dims (Error when invalid).
  explicit QuantizedPairs(const KvPlan& plan);

  int sink() const;
  // Keys [k0, k1) of `layer` held quantized when the query at position t attends.
  void keys(int layer, int t, int& k0, int& k1) const;
  // The same as an ActivationBackward range (valid while this object lives).
  QuantizedKeyRange range() const;

 private:
  int sink_;
  KvByteModel bytes_;
};

}  // namespace mpkv::calib

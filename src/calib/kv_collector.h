// The one K/V collector of calibration and `mpkv distortion`: runs token windows through the
// model's forward pass (a fresh fp16 cache per window) and keeps every layer's post-RoPE keys and
// values per KV head, as the cache would receive them (with the plan's key smoothing when given).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"

namespace mpkv::calib {

struct KvSamples {
  int n_layer = 0, n_head_kv = 0, head_dim = 0;
  // [layer * n_head_kv + head]: rows [n, head_dim] in window order.
  std::vector<std::vector<float>> keys, values;
  const std::vector<float>& key(int layer, int head) const { return keys[(size_t)layer * n_head_kv + head]; }
  const std::vector<float>& value(int layer, int head) const { return values[(size_t)layer * n_head_kv + head]; }
  int tokens() const { return keys.empty() || head_dim == 0 ? 0 : (int)(keys[0].size() / head_dim); }
};

// smoothing: the key smoothing scales [layer][n_head_kv * head_dim] (empty: none). skip_first:
// the first positions of every window are left out (the plan's fp16 sink, which the cache never
// quantizes). done(w) after each window. Error on an empty window.
KvSamples collect_kv(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                     const std::vector<std::vector<float>>& smoothing = {},
                     const std::function<void(size_t)>& done = {}, int skip_first = 0);

}  // namespace mpkv::calib

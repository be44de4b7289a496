#include "calib/kv_collector.h"

#include <algorithm>

#include "kvcache/f16_kv_cache.h"
#include "model/forward.h"
#include "util/error.h"

namespace mpkv::calib {

KvSamples collect_kv(const Model& model, const std::vector<std::vector<int32_t>>& windows,
                     const std::vector<std::vector<float>>& smoothing, const std::function<void(size_t)>& done,
                     int skip_first) {
  const ModelConfig& c = model.config();
  KvSamples s;
  s.n_layer = c.n_layer;
  s.n_head_kv = c.n_head_kv;
  s.head_dim = c.head_dim;
  s.keys.resize((size_t)c.n_layer * c.n_head_kv);
  s.values.resize(s.keys.size());
  const int hd = c.head_dim, nkv = c.n_head_kv;
  Forward fwd(model);
  if (!smoothing.empty()) fwd.set_qk_smoothing(smoothing);
  std::vector<int> seen(c.n_layer, 0);  // positions of the current window seen per layer
  fwd.set_kv_observer([&](int layer, int n, const float* k, const float* v) {
    const int p0 = seen[layer];
    seen[layer] += n;
    for (int t = std::max(0, skip_first - p0); t < n; ++t)
      for (int h = 0; h < nkv; ++h) {
        const size_t off = ((size_t)t * nkv + h) * hd;
        std::vector<float>& ks = s.keys[(size_t)layer * nkv + h];
        std::vector<float>& vs = s.values[(size_t)layer * nkv + h];
        ks.insert(ks.end(), k + off, k + off + hd);
        vs.insert(vs.end(), v + off, v + off + hd);
      }
  });
  std::vector<float> logits;
  for (size_t w = 0; w < windows.size(); ++w) {
    MPKV_CHECK(!windows[w].empty(), "K/V collection: window " + std::to_string(w) + " is empty");
    std::fill(seen.begin(), seen.end(), 0);
    F16KvCache cache(c.kv_dims());  // with the model's sliding windows
    std::vector<BatchToken> batch;
    const int n = (int)windows[w].size();
    for (int i = 0; i < n; ++i) batch.push_back({windows[w][i], i, 0, false});
    fwd.run(cache, batch, logits);
    if (done) done(w + 1);
  }
  return s;
}

}  // namespace mpkv::calib

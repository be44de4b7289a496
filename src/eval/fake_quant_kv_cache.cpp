#include "eval/fake_quant_kv_cache.h"

#include <algorithm>

namespace mpkv {

bool same_fake_quant_cache(const KvPlan& a, const KvPlan& b) {
  if (a.sink != b.sink || a.smoothing != b.smoothing || a.components.size() != b.components.size() ||
      a.dims.head_dim != b.dims.head_dim)
    return false;
  for (size_t i = 0; i < a.components.size(); ++i) {
    const KvComponentPlan &x = a.components[i], &y = b.components[i];
    if (x.fp16 != y.fp16) return false;
    if (!x.fp16 && (x.quantizer != y.quantizer || x.bits != y.bits || x.group != y.group)) return false;
  }
  return true;
}

std::vector<std::unique_ptr<KvQuantizer>> component_quantizers(const KvPlan& plan, const KvDims& dims) {
  std::vector<std::unique_ptr<KvQuantizer>> q((size_t)dims.n_layer * dims.n_head_kv * 2);
  for (int l = 0; l < dims.n_layer; ++l)
    for (int h = 0; h < dims.n_head_kv; ++h)
      for (KvRole role : {KvRole::key, KvRole::value}) {
        const KvComponentPlan& c = plan.at(l, h, role);
        if (c.fp16) continue;
        q[((size_t)l * dims.n_head_kv + h) * 2 + (role == KvRole::key ? 0 : 1)] =
            std::make_unique<KvQuantizer>(component_quant_options(plan, c, role, c.bits));
      }
  return q;
}

FakeQuantKvCache::FakeQuantKvCache(KvDims dims, const KvPlan& plan) : KvCache(dims), plan_(plan), inner_(dims) {
  validate(plan_, dims);
  quant_ = component_quantizers(plan_, dims);
}

void FakeQuantKvCache::fake_quantize(int layer, KvRole role, int p0, int n, float* rows) {
  const int hd = dims_.head_dim, kv_dim = dims_.n_head_kv * hd;
  for (int h = 0; h < dims_.n_head_kv; ++h) {
    const KvQuantizer* q = quant_[((size_t)layer * dims_.n_head_kv + h) * 2 + (role == KvRole::key ? 0 : 1)].get();
    if (!q) continue;
    const int g = q->token_granularity();
    // First quantized position: past the sink, on the group grid sink + k*g.
    int a = std::max(p0, plan_.sink);
    if (g > 1) a = plan_.sink + (a - plan_.sink + g - 1) / g * g;
    const int end = p0 + n;
    const int count = (end - a) / g * g;  // whole groups only
    if (count <= 0) continue;
    in_.resize((size_t)count * hd);
    out_.resize((size_t)count * hd);
    for (int i = 0; i < count; ++i) std::copy_n(rows + (size_t)(a - p0 + i) * kv_dim + h * hd, hd, in_.data() + (size_t)i * hd);
    for (int i = 0; i < count; i += g) q->quantize_dequantize(in_.data() + (size_t)i * hd, g, out_.data() + (size_t)i * hd);
    for (int i = 0; i < count; ++i) std::copy_n(out_.data() + (size_t)i * hd, hd, rows + (size_t)(a - p0 + i) * kv_dim + h * hd);
  }
}

void FakeQuantKvCache::append(int seq, int layer, int n_tokens, const float* k, const float* v) {
  const size_t size = (size_t)n_tokens * dims_.n_head_kv * dims_.head_dim;
  const int p0 = inner_.length(seq, layer);
  k_.assign(k, k + size);
  v_.assign(v, v + size);
  fake_quantize(layer, KvRole::key, p0, n_tokens, k_.data());
  fake_quantize(layer, KvRole::value, p0, n_tokens, v_.data());
  inner_.append(seq, layer, n_tokens, k_.data(), v_.data());
}

}  // namespace mpkv

#include "kvcache/kv_cache_factory.h"

#include <cmath>
#include <numeric>

#include "util/error.h"

namespace mpkv {

void validate(const KvCacheOptions& o) {
  for (auto [name, b] : {std::pair<const char*, int>{"--kv-bits", o.bits}, {"--kv-k-bits", o.k_bits}, {"--kv-v-bits", o.v_bits}}) {
    MPKV_CHECK(b >= 0 && b <= 16, std::string(name) + " " + std::to_string(b) + " is outside [1, 16]");
  }
  MPKV_CHECK(o.bits >= 1, "--kv-bits must be at least 1");
  MPKV_CHECK(o.group >= 0, "--kv-group must be 0 (default) or positive");
  MPKV_CHECK(o.window >= -1, "--kv-window must be -1 (default) or >= 0");
  MPKV_CHECK(o.sink >= -1, "--kv-sink must be -1 (default) or >= 0");
  MPKV_CHECK(std::isfinite(o.budget_mib) && o.budget_mib >= 0 && o.budget_mib <= 1 << 24,
             "--kv-budget-mib must be 0 (no budget) or a positive number of MiB");
  MPKV_CHECK(o.page_tokens >= 0 && o.page_tokens <= 65536, "--kv-page must be 0 (default) or in [1, 65536]");
}

KvPlan make_kv_plan(const KvCacheOptions& o, const KvDims& dims) {
  validate(o);
  KvPlan p;
  if (!o.plan_file.empty()) {
    p = load_kv_plan(o.plan_file, dims, o.model);
  } else {
    const int kb = o.k_bits ? o.k_bits : o.bits, vb = o.v_bits ? o.v_bits : o.bits;
    KvComponentPlan k, v;
    const bool f16 = o.method == KvMethod::f16;
    if (f16) {
      k.fp16 = v.fp16 = true;
      k.bits = v.bits = 16;
    } else {
      k.quantizer = v.quantizer = kv_method_quantizer(o.method);
      k.bits = kb;
      v.bits = vb;
      k.group = v.group = o.group;
    }
    p = uniform_kv_plan(dims, k, v);
    p.method = plan_method_of(o.method);
    p.progressive = o.method == KvMethod::progressive;
    p.window = f16 ? 0 : kDefaultKvWindow;
    p.sink = f16 ? 0 : kDefaultKvSink;
    int P = kDefaultPageTokens;
    if (o.method == KvMethod::kivi) P = std::lcm(P, o.group > 0 ? o.group : kKiviDefaultGroup);
    p.page_tokens = P;
  }
  if (o.window >= 0) {  // --kv-window sets every layer's window, a plan's per-layer ones included
    p.window = o.window;
    p.layer_windows.clear();
  }
  if (o.sink >= 0) p.sink = o.sink;
  if (o.page_tokens > 0) p.page_tokens = o.page_tokens;
  validate(p, dims, o.model);
  return p;
}

std::unique_ptr<PagedKvCache> make_kv_cache(const KvCacheOptions& o, const KvDims& dims) {
  KvPlan plan = make_kv_plan(o, dims);
  size_t budget = (size_t)std::llround(o.budget_mib * 1024.0 * 1024.0);
  // A progressive plan shrinks only under a budget: without --kv-budget-mib it gets the one it was
  // solved for (one sequence of solve.max_len tokens), instead of never shrinking.
  if (budget == 0 && plan.progressive && plan.solve.budget_bytes > 0) budget = (size_t)plan.solve.budget_bytes;
  auto cache = std::make_unique<PagedKvCache>(dims, std::move(plan), budget);
  if (budget > 0) {
    const size_t min_bytes = cache->byte_model().min_budget_bytes();
    MPKV_CHECK(budget >= min_bytes, "--kv-budget-mib " + std::to_string(o.budget_mib) +
                                        " cannot hold even one sequence: it needs at least " +
                                        std::to_string((double)min_bytes / (1024.0 * 1024.0)) +
                                        " MiB (sink and window buffers plus one page per layer)");
  }
  return cache;
}

std::string describe(const KvCacheOptions& o) {
  std::string s = o.plan_file.empty() ? kv_method_name(o.method) : "plan " + o.plan_file;
  if (o.plan_file.empty() && o.method != KvMethod::f16) {
    const int kb = o.k_bits ? o.k_bits : o.bits, vb = o.v_bits ? o.v_bits : o.bits;
    s += " K" + std::to_string(kb) + "/V" + std::to_string(vb);
    if (o.group) s += " group " + std::to_string(o.group);
  }
  if (o.window >= 0) s += ", window " + std::to_string(o.window);
  if (o.sink >= 0) s += ", sink " + std::to_string(o.sink);
  if (o.budget_mib > 0) s += ", budget " + std::to_string(o.budget_mib).substr(0, 8) + " MiB";
  return s;
}

}  // namespace mpkv

// Per-layer fp16 windows (KvPlan::layer_windows, docs/plan_format.md) are honored by the paged
// cache: a layer of a plan with windows {a, b} attends exactly as the same layer of a plan whose
// one window is that layer's, token by token and in chunks (chunked prefill), and a plan whose
// per-layer windows all equal its window behaves as the plan without them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_kvcache_support.h"

namespace mpkv {
namespace {

// Appends n tokens to sequence 0 of every layer in chunks of `chunk`, then returns each layer's
// attention output for 3 query tokens at the end ([layer][3 * n_head * head_dim]).
std::vector<std::vector<float>> attend_after(PagedKvCache& c, const KvDims& d, int n, int chunk) {
  for (int t = 0; t < n; t += chunk) {
    const int m = std::min(chunk, n - t);
    for (int l = 0; l < d.n_layer; ++l) {
      const auto k = test::random_kv(m, d, 1000 * t + l, true), v = test::random_kv(m, d, 2000 * t + l, false);
      c.append(0, l, m, k.data(), v.data());
    }
  }
  std::vector<std::vector<float>> out(d.n_layer);
  for (int l = 0; l < d.n_layer; ++l) {
    const auto k = test::random_kv(3, d, 77 + l, true), v = test::random_kv(3, d, 88 + l, false);
    c.append(0, l, 3, k.data(), v.data());
    const auto q = test::random_q(3, d, 99 + l);
    out[l].assign((size_t)3 * d.n_head * d.head_dim, 0.0f);
    c.attend(0, l, 3, q.data(), out[l].data());
  }
  return out;
}

KvPlan plan_with(const std::string& method, int window, const std::vector<int>& layer_windows, const KvDims& d) {
  KvPlan p = make_kv_plan(test::cache_options(method, 2, window, 2, method == "kivi" ? 32 : 16,
                                              method == "kivi" ? 16 : 0), d);
  p.layer_windows = layer_windows;
  return p;
}

TEST(KvLayerWindows, EachLayerAttendsWithItsOwnWindow) {
  const KvDims d = test::small_dims();
  for (const char* method : {"uniform", "kivi", "progressive"}) {
    for (int chunk : {1, 29}) {
      const std::string what = std::string(method) + ", chunks of " + std::to_string(chunk);
      PagedKvCache mixed(d, plan_with(method, 128, {4, 40}, d), 0);
      PagedKvCache w4(d, plan_with(method, 4, {}, d), 0);
      PagedKvCache w40(d, plan_with(method, 40, {}, d), 0);
      const auto a = attend_after(mixed, d, 150, chunk), b = attend_after(w4, d, 150, chunk),
                 e = attend_after(w40, d, 150, chunk);
      EXPECT_EQ(std::memcmp(a[0].data(), b[0].data(), a[0].size() * sizeof(float)), 0) << what << ": layer 0";
      EXPECT_EQ(std::memcmp(a[1].data(), e[1].data(), a[1].size() * sizeof(float)), 0) << what << ": layer 1";
      // The windows differ, so the outputs must too (the test can fail).
      EXPECT_NE(std::memcmp(b[1].data(), e[1].data(), b[1].size() * sizeof(float)), 0) << what;
      EXPECT_EQ(mixed.bytes_used(), mixed.byte_model().sequence_bytes(153, false)) << what;
    }
  }
}

TEST(KvLayerWindows, EqualPerLayerWindowsAreThePlanWithout) {
  const KvDims d = test::small_dims();
  for (const char* method : {"uniform", "kivi", "progressive"}) {
    PagedKvCache with(d, plan_with(method, 24, {24, 24}, d), 0);
    PagedKvCache without(d, plan_with(method, 24, {}, d), 0);
    const auto a = attend_after(with, d, 120, 7), b = attend_after(without, d, 120, 7);
    for (int l = 0; l < d.n_layer; ++l)
      EXPECT_EQ(std::memcmp(a[l].data(), b[l].data(), a[l].size() * sizeof(float)), 0) << method << " layer " << l;
    EXPECT_EQ(with.bytes_used(), without.bytes_used()) << method;
  }
}

}  // namespace
}  // namespace mpkv

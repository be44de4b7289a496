// The single-drop prediction check (docs/calibration.md "Prediction check"): the runtime fake-quant cache (each query sees quantized rows
// exactly where a PagedKvCache would hold them, fp16 in the sink and window) against F16 caches fed
// hand-quantized rows per query, and Spearman's rank correlation on hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eval/runtime_fake_kv_cache.h"
#include "eval/single_drop_check.h"
#include "kvcache/f16_kv_cache.h"
#include "kvcache/kv_cache_factory.h"
#include "kvcache/paged_kv_cache.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

// Same rows, same kernel, same merge order up to the split of the range: float rounding only.
constexpr float kAttendTol = 1e-5f;

void check_against_hand(const std::string& method) {
  const KvDims d{1, 2, 1, 16};
  KvCacheOptions o;
  o.method = parse_kv_method(method);
  o.bits = 2;
  o.sink = 2;
  o.window = 9;
  const KvPlan plan = make_kv_plan(o, d);
  const int n = 80, hd = d.head_dim;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k((size_t)n * hd), v((size_t)n * hd), q((size_t)n * 2 * hd);
  for (auto* a : {&k, &v, &q})
    for (auto& x : *a) x = g(rng);
  for (auto* a : {&k, &v})  // the cache quantizes its fp16 rows
    for (auto& x : *a) x = fp16_to_fp32(fp32_to_fp16(x));
  RuntimeFakeQuantKvCache cache(d, plan);
  cache.append(0, 0, n, k.data(), v.data());
  std::vector<float> out(q.size());
  cache.attend(0, 0, n, q.data(), out.data());
  KvQuantizer kq(component_quant_options(plan, plan.at(0, 0, KvRole::key), KvRole::key, 2));
  KvQuantizer vq(component_quant_options(plan, plan.at(0, 0, KvRole::value), KvRole::value, 2));
  const PagedKvCache rule(d, plan, 0);
  int quantized_somewhere = 0;
  for (int p = 0; p < n; ++p) {
    const int end = plan.sink + rule.byte_model().tokens_in_pages(0, p + 1), m = end - plan.sink;
    ASSERT_EQ(cache.quantized_end(0, p), end);
    std::vector<float> ek(k.begin(), k.begin() + (size_t)(p + 1) * hd), ev(v.begin(), v.begin() + (size_t)(p + 1) * hd);
    if (m > 0) {
      kq.quantize_dequantize(k.data() + (size_t)plan.sink * hd, m, ek.data() + (size_t)plan.sink * hd);
      vq.quantize_dequantize(v.data() + (size_t)plan.sink * hd, m, ev.data() + (size_t)plan.sink * hd);
      ++quantized_somewhere;
    }
    F16KvCache hand(d);
    hand.append(0, 0, p + 1, ek.data(), ev.data());
    std::vector<float> o1(2 * hd);
    // The last of p + 1 queries is position p.
    std::vector<float> qq((size_t)(p + 1) * 2 * hd, 0.0f), oo(qq.size());
    std::copy(q.begin() + (size_t)p * 2 * hd, q.begin() + (size_t)(p + 1) * 2 * hd, qq.end() - 2 * hd);
    hand.attend(0, 0, p + 1, qq.data(), oo.data());
    for (int i = 0; i < 2 * hd; ++i)
      ASSERT_NEAR(out[(size_t)p * 2 * hd + i], oo[(size_t)p * 2 * hd + i], kAttendTol) << method << " p " << p;
  }
  EXPECT_GT(quantized_somewhere, 20);
}

TEST(RuntimeFakeQuantKvCache, EachQuerySeesQuantizedRowsExactlyWhereTheCacheHoldsThem) {
  check_against_hand("uniform");
  check_against_hand("kivi");  // key groups of 32 tokens from the sink
}

TEST(RuntimeFakeQuantKvCache, AppendsInPiecesGiveTheSameRows) {
  const KvDims d{1, 2, 1, 16};
  KvCacheOptions o;
  o.method = KvMethod::kivi;
  o.bits = 2;
  const KvPlan plan = make_kv_plan(o, d);
  const int n = 300, hd = 16;
  std::mt19937 rng(4);
  std::normal_distribution<float> g;
  std::vector<float> k((size_t)n * hd), v(k.size()), q((size_t)2 * hd);
  for (auto* a : {&k, &v, &q})
    for (auto& x : *a) x = g(rng);
  RuntimeFakeQuantKvCache whole(d, plan), pieces(d, plan);
  whole.append(0, 0, n, k.data(), v.data());
  for (int t = 0; t < n; t += 7) {
    const int m = std::min(7, n - t);
    pieces.append(0, 0, m, k.data() + (size_t)t * hd, v.data() + (size_t)t * hd);
  }
  std::vector<float> a(2 * hd), b(2 * hd);
  whole.attend(0, 0, 1, q.data(), a.data());
  pieces.attend(0, 0, 1, q.data(), b.data());
  EXPECT_EQ(a, b);
}

TEST(Spearman, HandComputedCases) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 400}), 1.0);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 3, 2, 4}), 0.8, 1e-12);  // 1 - 6 * 2 / (4 * 15)
  // Ties take the average rank: ranks of {1, 1, 2} are {1.5, 1.5, 3}.
  EXPECT_NEAR(spearman({1, 1, 2}, {1, 2, 3}), 0.8660254037844386, 1e-12);
  EXPECT_THROW(spearman({1}, {1}), Error);
  EXPECT_THROW(spearman({1, 2}, {1, 2, 3}), Error);
}

}  // namespace
}  // namespace mpkv

// KvByteModel (kv_byte_model.h) against real caches: for every method and a set of plans, the
// model's figure for a sequence of N tokens equals the bytes a PagedKvCache holds after those N
// tokens are appended (token by token), and again after every full page is shrunk to its final
// bits. The held bytes are also recounted from the cache's pages through the quantizers' own block
// layouts and the hand formula for the fixed part, so the model is not checked against itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/kv_byte_model.h"
#include "test_kvcache_support.h"

namespace mpkv {
namespace {

// Fixed part by hand: records, and per layer the fp16 sink + its window + one page of rows for K
// and V (the window: the layer's layer_windows entry when the plan has them, else window).
size_t fixed_by_hand(const KvDims& d, const KvPlan& p) {
  size_t b = 256;
  for (int l = 0; l < d.n_layer; ++l) {
    const int window = p.layer_windows.empty() ? p.window : p.layer_windows[l];
    const size_t rows = (size_t)(p.sink + window + p.page_tokens);
    b += 128 + 2 * rows * d.n_head_kv * d.head_dim * 2;
  }
  return b;
}

// What sequence 0 holds, recounted from its pages: each block's layout bytes at its current bits
// (fp16 blocks: P rows of head_dim halves) plus 320 + 2 bytes per block of page record.
size_t held_by_pages(const PagedKvCache& c, const KvDims& d) {
  size_t b = fixed_by_hand(d, c.plan());
  const int blocks = d.n_head_kv * 2;
  for (int l = 0; l < d.n_layer; ++l) {
    for (int p = 0; p < c.n_pages(0, l); ++p) {
      b += 320 + 2 * (size_t)blocks;
      for (int k = 0; k < blocks; ++k) {
        if (c.plan().at(l, k / 2, k % 2 == 0 ? KvRole::key : KvRole::value).fp16) {
          b += (size_t)c.plan().page_tokens * d.head_dim * 2;
          continue;
        }
        KvBlockLayout L;
        c.page_block(0, l, p, k, &L);
        b += L.bytes;
      }
    }
  }
  return b;
}

void check_plan(const KvDims& d, const KvPlan& plan, const std::vector<int>& lengths, const std::string& what) {
  const KvByteModel model(d, plan);
  EXPECT_EQ(model.sequence_fixed_bytes(), fixed_by_hand(d, plan)) << what;
  for (int n : lengths) {
    PagedKvCache c(d, plan, 0);  // no budget: pages stay at their initial bits until shrink()
    for (int t = 0; t < n; ++t)
      for (int l = 0; l < d.n_layer; ++l) {
        const auto k = test::random_kv(1, d, 97 * t + l, true), v = test::random_kv(1, d, 89 * t + l, false);
        c.append(0, l, 1, k.data(), v.data());
      }
    const std::string at = what + ", " + std::to_string(n) + " tokens";
    for (int l = 0; l < d.n_layer; ++l) EXPECT_EQ(c.n_pages(0, l), model.live_pages(l, n)) << at << " layer " << l;
    EXPECT_EQ(c.bytes_used(), model.sequence_bytes(n, false)) << at << " as written";
    EXPECT_EQ(c.bytes_used(), held_by_pages(c, d)) << at << " as written";
    c.shrink(SIZE_MAX);
    EXPECT_EQ(c.bytes_used(), model.sequence_bytes(n, true)) << at << " at final bits";
    EXPECT_EQ(c.bytes_used(), held_by_pages(c, d)) << at << " at final bits";
    EXPECT_LE(c.bytes_used(), model.sequence_bytes_bound(n)) << at;
    // With every layer global and the newest page open, the bound is exact.
    bool open = true;
    for (int l = 0; l < d.n_layer; ++l)
      open = open && d.window_of(l) == 0 && model.tokens_in_pages(l, n) % plan.page_tokens != 0;
    if (open) {
      EXPECT_EQ(c.bytes_used(), model.sequence_bytes_bound(n)) << at;
    }
  }
}

KvCacheOptions options(KvMethod m, int k_bits, int v_bits) {
  KvCacheOptions o;
  o.method = m;
  o.bits = v_bits;
  o.k_bits = k_bits;
  o.v_bits = v_bits;
  o.window = 8;
  o.sink = 2;
  o.page_tokens = m == KvMethod::kivi ? 32 : 16;
  if (m == KvMethod::kivi) o.group = 16;
  return o;
}

const std::vector<int> kLengths = {1, 2, 9, 10, 26, 27, 42, 43, 100, 171};

TEST(KvByteModel, EveryMethodMatchesARealCache) {
  // Global layers, and layer 0 sliding with a window of 37 (its pages are freed as they leave it).
  for (const KvDims& d : {test::small_dims(), KvDims{2, 4, 2, 64, {37, 0}}}) {
    for (const KvMethod m : kKvMethods) {
      for (const auto& [kb, vb] : {std::pair{4, 2}, std::pair{2, 2}, std::pair{8, 4}}) {
        if (m == KvMethod::turbo && kb > 4) continue;  // Lloyd-Max codes: 1-4 bits
        const KvCacheOptions o = options(m, kb, vb);
        check_plan(d, make_kv_plan(o, d), kLengths,
                   std::string(kv_method_name(m)) + " K" + std::to_string(kb) + "/V" + std::to_string(vb) +
                       (d.window.empty() ? "" : " sliding"));
      }
    }
  }
}

// Mixed components: fp16 heads beside quantized ones, different quantizers and bits per layer.
TEST(KvByteModel, MixedPlansMatchARealCache) {
  const KvDims d = test::small_dims();
  for (bool progressive : {false, true}) {
    KvPlan p = make_kv_plan(options(KvMethod::uniform, 4, 4), d);
    p.progressive = progressive;
    p.at(0, 0, KvRole::key).bits = 8;
    p.at(0, 1, KvRole::value).bits = 2;
    p.at(1, 0, KvRole::key).fp16 = true;
    p.at(1, 0, KvRole::key).bits = 16;
    p.at(1, 1, KvRole::value).bits = 1;
    if (!progressive) p.at(1, 1, KvRole::key).quantizer = QuantMethod::rotated;
    check_plan(d, p, kLengths, progressive ? "mixed progressive" : "mixed");
  }
}

// Per-layer fp16 windows (plan.layer_windows): each layer's sink + window buffer and its flushes
// follow its own window, for every quantizer's flush granularity, global and sliding layers.
TEST(KvByteModel, PerLayerWindowsMatchARealCache) {
  for (const KvDims& d : {test::small_dims(), KvDims{2, 4, 2, 64, {37, 0}}}) {
    for (const KvMethod m : {KvMethod::uniform, KvMethod::kivi, KvMethod::progressive}) {
      for (const std::vector<int>& w : {std::vector<int>{0, 8}, std::vector<int>{20, 3}}) {
        KvPlan p = make_kv_plan(options(m, 4, 2), d);
        p.layer_windows = w;
        check_plan(d, p, kLengths,
                   std::string(kv_method_name(m)) + " windows " + std::to_string(w[0]) + "/" + std::to_string(w[1]) +
                       (d.window.empty() ? "" : " sliding"));
      }
    }
  }
}

// Calibrated plans from docs/results (SmolLM2-135M's dims: 30 layers, 9 / 3 heads, head_dim 64);
// the bytes each was solved to are the model's bound for its max_len.
TEST(KvByteModel, CalibratedPlansMatchARealCache) {
  const KvDims d{30, 9, 3, 64};
  for (const char* name : {"combined_2.5", "pmkvq_2", "ratequant_3", "fixed_k4v2"}) {
    const std::string file = std::string(MPKV_SOURCE_DIR) + "/docs/results/plans_kivi/" + name + ".json";
    const KvPlan plan = load_kv_plan(file, d);
    EXPECT_EQ((int64_t)KvByteModel(d, plan).sequence_bytes_bound((int)plan.solve.max_len), plan.solve.bytes) << name;
    check_plan(d, plan, {1, 300}, name);
  }
}

// The budget floor make_kv_cache enforces: one sequence, one page per layer at final bits.
TEST(KvByteModel, MinimumBudgetIsOneSequenceWithOnePagePerLayer) {
  const KvDims d = test::small_dims();
  const KvPlan p = make_kv_plan(options(KvMethod::progressive, 2, 2), d);
  const KvByteModel m(d, p);
  EXPECT_EQ(m.min_budget_bytes(), fixed_by_hand(d, p) + 2 * (4 * m.block_bytes(0, 0, 2) + 328));
  EXPECT_EQ(m.sequences_within(3 * m.sequence_bytes_bound(100) + 1, 100), 3u);
}

}  // namespace
}  // namespace mpkv

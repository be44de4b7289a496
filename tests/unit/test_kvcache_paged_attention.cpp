// Attention of the paged cache against "dequantize everything, then attend" in double, for every
// method and every kernel variant this CPU runs; the fp16 path against F16KvCache; chunked
// appends against token-by-token ones.
#include <gtest/gtest.h>

#include <cfloat>
#include <string>

#include "kvcache/f16_kv_cache.h"
#include "test_kvcache_support.h"
#include "util/cpu_features.h"

namespace mpkv {
namespace {

using test::History;

// The cache attends in fp32 over exactly the values the reference dequantizes: scores are fp32
// sums of head_dim products (|q||k| up to ~100 here: relative 64 * eps), exp is a polynomial with
// ~2e-7 relative error, and the outputs are weighted fp32 sums of values; the packed kernels fold
// scale and zero out of the group sums. Observed up to 1.2e-6 of max |V| (uniform 4-bit, no
// window); 5e-6 leaves a 4x margin.
constexpr double kAttendVsDequantizedRel = 5e-6;
// fp16 pages vs F16KvCache: both hold the same fp16 values; only summation order and the exp
// approximation differ.
constexpr double kF16PathRel = 1e-5;

struct MethodCase {
  std::string name;
  KvCacheOptions opt;
};

std::vector<MethodCase> method_cases() {
  auto mk = [](std::string m, int bits, int group = 0, int window = 8, int sink = 1, int page = 16) {
    return test::cache_options(m, bits, window, sink, page, group);
  };
  std::vector<MethodCase> v = {
      {"f16", mk("f16", 16, 0, 0, 0)},
      {"uniform2", mk("uniform", 2)},
      {"uniform3", mk("uniform", 3)},
      {"uniform4_g32", mk("uniform", 4, 32)},
      {"uniform8_g16", mk("uniform", 8, 16)},
      {"uniform16", mk("uniform", 16)},
      {"uniform4_nowindow", mk("uniform", 4, 0, 0, 0)},
      {"kivi2", mk("kivi", 2, 8, 8, 1, 16)},
      {"kivi4", mk("kivi", 4, 16, 8, 1, 32)},
      {"rotated4", mk("rotated", 4)},
      {"turbo2", mk("turbo", 2)},
      {"turbo3", mk("turbo", 3)},
      {"progressive2", mk("progressive", 2)},
  };
  KvCacheOptions mixed = mk("uniform", 4);
  mixed.k_bits = 8;
  mixed.v_bits = 2;
  v.push_back({"uniform_k8_v2", mixed});
  return v;
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::scalar};
  if (best_isa() >= Isa::avx2) v.push_back(Isa::avx2);
  if (best_isa() >= Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

// Appends in the chunk sizes given to (seq, every layer), attending after each chunk, and checks
// every output against the dequantized reference.
void run_and_check(PagedKvCache& cache, int seq, const std::vector<int>& chunks, uint32_t seed, const std::string& what) {
  const KvDims d = cache.dims();
  const size_t row = (size_t)d.n_head_kv * d.head_dim;
  std::vector<History> hist(d.n_layer);
  int pos = 0;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int n = chunks[ci];
    for (int l = 0; l < d.n_layer; ++l) {
      const auto k = test::random_kv(n, d, seed + 1000 * (uint32_t)ci + 7 * l, true);
      const auto v = test::random_kv(n, d, seed + 1000 * (uint32_t)ci + 7 * l + 3, false);
      const auto q = test::random_q(n, d, seed + 1000 * (uint32_t)ci + 7 * l + 5);
      if (l == 0) {
        ASSERT_TRUE(cache.reserve(seq, n));
      }
      cache.append(seq, l, n, k.data(), v.data());
      hist[l].add(n, k.data(), v.data(), row);
      std::vector<float> out(q.size());
      cache.attend(seq, l, n, q.data(), out.data());
      std::vector<double> K, V;
      test::dequantized_cache(cache, seq, l, hist[l], K, V);
      const auto ref = test::reference_attention_decoded(cache, l, hist[l], K, V, q.data(), n);
      const double tol = kAttendVsDequantizedRel * max_abs(V);
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(out[i] - ref[i]));
      ASSERT_LE(worst, tol) << what << " seq " << seq << " layer " << l << " after " << pos + n << " tokens (chunk " << n
                            << ")";
    }
    pos += n;
  }
}

TEST(PagedAttention, EveryMethodMatchesDequantizeThenAttend) {
  const KvDims d = test::small_dims();
  for (const MethodCase& mc : method_cases()) {
    for (Isa isa : isas()) {
      const KvPlan plan = make_kv_plan(mc.opt, d);
      PagedKvCache cache(d, plan, 0, paged_attention_kernels_for(isa));
      cache.set_q8_queries(false);  // float queries: the kernels' only error is fp32 rounding
      const std::string what = mc.name + " / " + isa_name(isa);
      // Prefill chunks (one spanning several pages, one not a multiple of anything), then decode.
      run_and_check(cache, 3, {37, 1, 1, 70, 5, 1, 1, 1, 16, 1}, 100, what);
      run_and_check(cache, 9, {1, 1, 2, 40}, 200, what + " (second sequence)");
    }
  }
}

// A budget that forces pages down the ladder while the sequence grows: the reference follows the
// pages' current bits, so this checks attention over mixed 16/8/4/2-bit pages.
TEST(PagedAttention, ProgressiveUnderBudgetMatchesDequantizeThenAttend) {
  const KvDims d = test::small_dims();
  KvCacheOptions o;
  o.method = KvMethod::progressive;
  o.bits = 2;
  o.window = 8;
  o.page_tokens = 16;
  for (Isa isa : isas()) {
    const KvPlan plan = make_kv_plan(o, d);
    PagedKvCache probe(d, plan, 0);
    // Room for the fixed buffers and 6 pages per layer at 16 bits (188 tokens need 11 per layer).
    const size_t budget = probe.byte_model().sequence_fixed_bytes() + 6 * (size_t)d.n_layer *
                                                             (probe.byte_model().page_data_bytes(0, false) + probe.byte_model().page_metadata_bytes());
    PagedKvCache cache(d, plan, budget, paged_attention_kernels_for(isa));
    cache.set_q8_queries(false);
    // Chunks of 20 need at most 2 fresh 16-bit pages per layer at once, which shrinking can free.
    run_and_check(cache, 0, {40, 1, 1, 20, 1, 1, 20, 1, 20, 1, 20, 1, 20, 1, 20, 1, 20}, 300, std::string("progressive budget / ") + isa_name(isa));
    const auto hist = cache.bits_histogram();
    EXPECT_GT(cache.shrink_totals().page_shrinks, 0u);
    EXPECT_GT(hist.count(2) + hist.count(4) + hist.count(8), 0u) << "nothing was shrunk";
    EXPECT_LE(cache.pool().peak_used(), budget);
  }
}

// Int8 queries for 2- and 4-bit keys (the default) add far less error than the key codes
// themselves: against attention over the unquantized (fp16) K/V, the RMS error with int8 queries
// must stay within (1 + kQ8ExtraErrorRatio) of the float-query RMS error.
constexpr double kQ8ExtraErrorRatio = 0.25;

TEST(PagedAttention, Q8QueriesAddLittleToTheKeyQuantizationError) {
  const KvDims d = test::small_dims();
  const size_t row = (size_t)d.n_head_kv * d.head_dim;
  for (const char* m : {"uniform2", "uniform4", "progressive4", "rotated4", "rotated2"}) {
    KvCacheOptions o;
    o.method = parse_kv_method(std::string(m).substr(0, std::string(m).size() - 1));
    o.bits = m[std::string(m).size() - 1] - '0';
    o.window = 8;
    o.page_tokens = 16;
    const KvPlan plan = make_kv_plan(o, d);
    PagedKvCache probe(d, plan, 0);
    // progressive: a budget that forces pages down to their final 4 bits.
    const size_t budget = o.method == KvMethod::progressive ? probe.byte_model().sequence_bytes_bound(400) + 2 * probe.byte_model().page_data_bytes(0, false) : 0;
    for (Isa isa : isas()) {
      PagedKvCache q8(d, plan, budget, paged_attention_kernels_for(isa)), fl(d, plan, budget, paged_attention_kernels_for(isa));
      fl.set_q8_queries(false);
      History h;
      double se_q8 = 0, se_fl = 0;
      size_t count = 0;
      for (int step = 0; step < 16; ++step) {
        const int n = step == 0 ? 40 : 20;  // 340 tokens; chunks small enough for the progressive budget
        const auto k = test::random_kv(n, d, 40 + step, true), v = test::random_kv(n, d, 60 + step, false);
        const auto q = test::random_q(n, d, 80 + step);
        for (PagedKvCache* c : {&q8, &fl}) {
          ASSERT_TRUE(c->reserve(0, n));
          for (int l = 0; l < d.n_layer; ++l) c->append(0, l, n, k.data(), v.data());
        }
        h.add(n, k.data(), v.data(), row);
        std::vector<double> K(h.k.size()), V(h.v.size());
        for (size_t i = 0; i < K.size(); ++i) K[i] = test::round_fp16(h.k[i]), V[i] = test::round_fp16(h.v[i]);
        const auto exact = test::reference_attention(d, K, V, h.n, q.data(), n);
        std::vector<float> a(q.size()), b(q.size());
        q8.attend(0, 1, n, q.data(), a.data());
        fl.attend(0, 1, n, q.data(), b.data());
        for (size_t i = 0; i < exact.size(); ++i) {
          se_q8 += (a[i] - exact[i]) * (a[i] - exact[i]);
          se_fl += (b[i] - exact[i]) * (b[i] - exact[i]);
        }
        count += exact.size();
      }
      const double rms_q8 = std::sqrt(se_q8 / count), rms_fl = std::sqrt(se_fl / count);
      EXPECT_LE(rms_q8, rms_fl * (1 + kQ8ExtraErrorRatio)) << m << " / " << isa_name(isa);
      if (o.method == KvMethod::progressive) {
        EXPECT_GT(q8.shrink_totals().page_shrinks, 0u);
      }
      std::printf("%-13s %-6s RMS error vs fp16 attention: float queries %.4f, int8 queries %.4f\n", m, isa_name(isa),
                  rms_fl, rms_q8);
    }
  }
}

TEST(PagedAttention, F16PathMatchesF16KvCache) {
  const KvDims d = test::small_dims();
  KvCacheOptions o;  // f16: fp16 pages, no sink / window
  o.page_tokens = 16;
  auto paged = make_kv_cache(o, d);
  F16KvCache ref(d);
  for (int seq : {0, 5}) {
    int n_total = 0;
    for (int n : {33, 1, 1, 17, 1, 64, 1}) {
      for (int l = 0; l < d.n_layer; ++l) {
        const auto k = test::random_kv(n, d, 10 * n_total + l + seq, true);
        const auto v = test::random_kv(n, d, 10 * n_total + l + seq + 1, false);
        const auto q = test::random_q(n, d, 10 * n_total + l + seq + 2);
        paged->append(seq, l, n, k.data(), v.data());
        ref.append(seq, l, n, k.data(), v.data());
        std::vector<float> a(q.size()), b(q.size());
        paged->attend(seq, l, n, q.data(), a.data());
        ref.attend(seq, l, n, q.data(), b.data());
        double vmax = 0;
        for (float x : v) vmax = std::max(vmax, (double)std::abs(x));
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], kF16PathRel * vmax * 4) << "seq " << seq << " i " << i;
      }
      n_total += n;
      EXPECT_EQ(paged->length(seq, 0), ref.length(seq, 0));
    }
  }
}

// Chunked prefill stores exactly what token-by-token appends store: same bytes in every page,
// identical attention outputs for the same query.
TEST(PagedAttention, ChunkedAppendEqualsTokenByToken) {
  const KvDims d = test::small_dims();
  for (const MethodCase& mc : method_cases()) {
    const KvPlan plan = make_kv_plan(mc.opt, d);
    PagedKvCache a(d, plan, 0), b(d, plan, 0);
    const int n = 150;
    const auto k = test::random_kv(n, d, 1, true), v = test::random_kv(n, d, 2, false);
    const auto q = test::random_q(1, d, 3);
    const size_t row = (size_t)d.n_head_kv * d.head_dim;
    for (int l = 0; l < d.n_layer; ++l) {
      a.append(0, l, 100, k.data(), v.data());
      a.append(0, l, 50, k.data() + 100 * row, v.data() + 100 * row);
      for (int t = 0; t < n; ++t) b.append(0, l, 1, k.data() + t * row, v.data() + t * row);
      ASSERT_EQ(a.n_pages(0, l), b.n_pages(0, l)) << mc.name;
      std::vector<float> oa((size_t)d.n_head * d.head_dim), ob(oa.size());
      a.attend(0, l, 1, q.data(), oa.data());
      b.attend(0, l, 1, q.data(), ob.data());
      for (size_t i = 0; i < oa.size(); ++i) ASSERT_EQ(oa[i], ob[i]) << mc.name << " layer " << l;
      if (plan.at(l, 0, KvRole::key).fp16) continue;
      for (int p = 0; p < a.n_pages(0, l); ++p) {
        for (int blk = 0; blk < 2 * d.n_head_kv; ++blk) {
          KvBlockLayout La, Lb;
          const uint8_t* pa = a.page_block(0, l, p, blk, &La);
          const uint8_t* pb = b.page_block(0, l, p, blk, &Lb);
          ASSERT_EQ(La.bytes, Lb.bytes);
          ASSERT_EQ(0, std::memcmp(pa, pb, La.bytes)) << mc.name << " layer " << l << " page " << p << " block " << blk;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mpkv

// Memory accounting, progressive shrinking and the shared budget of the paged cache: byte counts
// computed by hand, shrunk pages equal to codes shifted directly, sequences that do not disturb
// each other, the kv_budget stop, and a randomised run that never exceeds the budget or shrinks
// a block below its final bits.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "quant/kv_quantizer.h"
#include "test_kvcache_inspection.h"
#include "test_kvcache_support.h"
#include "util/error.h"

namespace mpkv {
namespace {

using test::History;

// Surviving sequences are checked against the dequantized reference (see test_kvcache_paged_attention).
constexpr double kAttendVsDequantizedRel = 5e-6;

KvCacheOptions opts(const std::string& method, int bits, int window, int sink, int page, int group = 0) {
  return test::cache_options(method, bits, window, sink, page, group);
}

void append_all_layers(KvCache& c, int seq, int n, uint32_t seed, std::vector<History>* hist = nullptr) {
  const KvDims d = c.dims();
  for (int l = 0; l < d.n_layer; ++l) {
    const auto k = test::random_kv(n, d, seed * 31 + l, true), v = test::random_kv(n, d, seed * 31 + l + 13, false);
    c.append(seq, l, n, k.data(), v.data());
    if (hist) (*hist)[l].add(n, k.data(), v.data(), (size_t)d.n_head_kv * d.head_dim);
  }
}

// ---- accounting by hand ----------------------------------------------------------------------------

// dims: 2 layers, 2 KV heads, head_dim 64. Page of P tokens holds 4 blocks (2 heads x K, V).
// Fixed per sequence: 256 + 2 layers x (128 + 2 (K,V) x (sink + window + P) rows x 2 heads x 64 x 2 bytes).
// Page metadata: 320 + 2 bytes x 4 blocks = 328.
TEST(PagedBudget, AccountingEqualsHandCount) {
  const KvDims d = test::small_dims();
  {  // uniform 4-bit, G = 64, P = 16, window 8, sink 1; 100 tokens.
    auto c = make_kv_cache(opts("uniform", 4, 8, 1, 16), d);
    const size_t fixed = 256 + 2 * (128 + 2 * (1 + 8 + 16) * 2 * 64 * 2);
    EXPECT_EQ(c->byte_model().sequence_fixed_bytes(), fixed);
    append_all_layers(*c, 0, 100, 1);
    // 99 tokens after the sink, 8 stay in the window: 91 in pages -> 6 pages per layer.
    // Block: codes 16 x 64 x 4 / 8 = 512, scales 16 x 2 = 32, zeros 32 -> 576 bytes.
    EXPECT_EQ(c->n_pages(0, 0), 6);
    const size_t page = 4 * 576 + 328;
    EXPECT_EQ(c->bytes_used(), fixed + 2 * 6 * page);
    append_all_layers(*c, 1, 10, 2);  // a second sequence: 10 - 1 - 8 = 1 token in pages -> 1 page per layer
    EXPECT_EQ(c->bytes_used(), 2 * fixed + 2 * 7 * page);
    c->remove(0);
    EXPECT_EQ(c->bytes_used(), fixed + 2 * 1 * page);
    c->remove(1);
    EXPECT_EQ(c->bytes_used(), 0u);
  }
  {  // KIVI 2-bit, --kv-group 8: keys per-channel over groups of 8 tokens, values per-token over
     // groups of 8 channels; P = 16, window 4, sink 0.
    auto c = make_kv_cache(opts("kivi", 2, 4, 0, 16, 8), d);
    const size_t fixed = 256 + 2 * (128 + 2 * (0 + 4 + 16) * 2 * 64 * 2);
    EXPECT_EQ(c->byte_model().sequence_fixed_bytes(), fixed);
    append_all_layers(*c, 0, 30, 3);
    // Window keeps 4 + (26 mod 8) = 6 tokens; 24 in pages -> 2 pages per layer.
    // Key block: codes 16 x 64 x 2 / 8 = 256, params (16 / 8) x 64 = 128 scales + 128 zeros = 512 -> 768.
    // Value block: codes 256, params 16 x 8 = 128 scales + 128 zeros = 512 -> 768.
    EXPECT_EQ(c->n_pages(0, 1), 2);
    EXPECT_EQ(c->bytes_used(), fixed + 2 * 2 * (4 * 768 + 328));
  }
  {  // f16 pages: P = 16 rows x 64 x 2 bytes per block; no sink / window (buffer of P rows).
    auto c = make_kv_cache(opts("f16", 16, 0, 0, 16), d);
    const size_t fixed = 256 + 2 * (128 + 2 * 16 * 2 * 64 * 2);
    append_all_layers(*c, 0, 33, 4);
    EXPECT_EQ(c->bytes_used(), fixed + 2 * 3 * (4 * 2048 + 328));
  }
  {  // progressive 2-bit, 16-bit pages: block 16 x 64 x 2 + 32 + 32 = 2112; at 2 bits 256 + 64 = 320.
    auto c = make_kv_cache(opts("progressive", 2, 8, 1, 16), d);
    EXPECT_EQ(c->byte_model().page_data_bytes(0, false), 4u * 2112);
    EXPECT_EQ(c->byte_model().page_data_bytes(0, true), 4u * 320);
    const size_t fixed = 256 + 2 * (128 + 2 * (1 + 8 + 16) * 2 * 64 * 2);
    // 300 tokens: 291 in pages -> 19 pages per layer: 18 at 2 bits, the newest bounded at 16 bits.
    EXPECT_EQ(c->byte_model().sequence_bytes_bound(300), fixed + 2 * (18 * (4 * 320 + 328) + 4 * 2112 + 328));
  }
}

// ---- shrinking ------------------------------------------------------------------------------------

// Every page of a progressive cache equals its rows quantized at 16 bits and then shifted down
// to the page's current bits by shrink_block, byte for byte.
TEST(PagedBudget, ShrunkPageEqualsDirectShiftOfTheSameCodes) {
  const KvDims d = test::small_dims();
  const KvPlan plan = make_kv_plan(opts("progressive", 2, 8, 1, 16, 32), d);
  PagedKvCache probe(d, plan, 0);
  // Fixed + 5 pages per layer at 16 bits; 200 tokens need 12 pages per layer.
  const size_t budget = probe.byte_model().sequence_fixed_bytes() + 2 * 5 * (probe.byte_model().page_data_bytes(0, false) + probe.byte_model().page_metadata_bytes());
  PagedKvCache c(d, plan, budget);
  std::vector<History> hist(d.n_layer);
  for (int step = 0; step < 20; ++step) {
    ASSERT_TRUE(c.reserve(0, 10));
    append_all_layers(c, 0, 10, 100 + step, &hist);
  }
  std::map<int, int> seen;
  const int P = plan.page_tokens, hd = d.head_dim;
  const size_t row = (size_t)d.n_head_kv * hd;
  for (int l = 0; l < d.n_layer; ++l) {
    for (int p = 0; p < c.n_pages(0, l); ++p) {
      for (int b = 0; b < 2 * d.n_head_kv; ++b) {
        KvBlockLayout L;
        const uint8_t* got = c.page_block(0, l, p, b, &L);
        ASSERT_GE(L.bits, page_final_bits(c, 0, l, p, b));
        seen[L.bits]++;
        const KvRole role = b % 2 == 0 ? KvRole::key : KvRole::value;
        const KvQuantizer q16(component_quant_options(plan, plan.at(l, b / 2, role), role, 16));
        KvBlockLayout cur = q16.block_layout(P);
        std::vector<float> x((size_t)P * hd);
        const int rows = std::min(P, c.byte_model().tokens_in_pages(l, hist[l].n) - p * P);
        for (int t = 0; t < rows; ++t)
          for (int ch = 0; ch < hd; ++ch) {
            const std::vector<float>& src = role == KvRole::key ? hist[l].k : hist[l].v;
            x[(size_t)t * hd + ch] = test::round_fp16(src[(size_t)(plan.sink + p * P + t) * row + (size_t)(b / 2) * hd + ch]);
          }
        std::vector<uint8_t> blk(cur.bytes, 0);
        q16.quantize(cur, x.data(), (size_t)hd, 0, rows, blk.data());
        while (cur.bits > L.bits) {
          const KvBlockLayout half = halved_layout(cur);
          std::vector<uint8_t> out(half.bytes);
          shrink_block(cur, blk.data(), half, out.data());
          blk.swap(out);
          cur = half;
        }
        ASSERT_EQ(cur.bytes, L.bytes);
        // Only the filled rows' codes and params are defined in a partly filled page.
        if (rows == P) {
          ASSERT_EQ(0, std::memcmp(blk.data(), got, L.bytes)) << "layer " << l << " page " << p << " block " << b;
        }
      }
    }
  }
  EXPECT_GT(seen[2], 0) << "no page reached its final bits";
  EXPECT_GT(seen[16], 0) << "no page stayed at 16 bits";
  EXPECT_LE(c.pool().peak_used(), budget);
}

// Highest current bits first, then oldest: the pool moves 16 -> 8 everywhere before 8 -> 4.
TEST(PagedBudget, ShrinkOrderIsHighestBitsThenOldest) {
  const KvDims d = test::small_dims();
  const KvPlan plan = make_kv_plan(opts("progressive", 2, 0, 0, 16), d);
  PagedKvCache probe(d, plan, 0);
  // Fixed + 8 pages per layer at 16 bits; 16 pages per layer only fit once older ones shrink.
  const size_t budget = probe.byte_model().sequence_fixed_bytes() + 2 * 8 * (probe.byte_model().page_data_bytes(0, false) + probe.byte_model().page_metadata_bytes());
  PagedKvCache c(d, plan, budget);
  for (int step = 0; step < 16; ++step) {
    ASSERT_TRUE(c.reserve(0, 16));
    append_all_layers(c, 0, 16, step);
    // Bits never increase with page age within a layer, and span at most one halving step.
    for (int l = 0; l < d.n_layer; ++l) {
      int hi = 0, lo = 99;
      for (int p = 0; p < c.n_pages(0, l); ++p) {
        const int bits = page_current_bits(c, 0, l, p, 0);
        if (p > 0) {
          EXPECT_GE(bits, page_current_bits(c, 0, l, p - 1, 0)) << "an older page has more bits";
        }
        hi = std::max(hi, bits);
        if (p + 1 < c.n_pages(0, l)) lo = std::min(lo, bits);  // the newest page may still be at 16
      }
      if (lo != 99 && hi < 16) {
        EXPECT_LE(hi / lo, 2) << "pages more than one halving apart";
      }
    }
  }
  EXPECT_GT(c.shrink_totals().page_shrinks, 0u);
}

// Faithful PM-KVQ at run time (docs/calibration.md "Progressive runtime"): with component sensitivities the cheapest halving (least
// sensitivity added per byte freed) goes first, so a sensitive layer whose final width is 8 stays at
// 16 bits while a cheap layer (final 2) can still shrink, and never drops below 8. Without costs
// (the old order, most bits first) layer 0's pages would go 16 -> 8 as early as layer 1's.
TEST(PagedBudget, CheapestShrinkFirstAndNeverBelowFinalBits) {
  const KvDims d = test::small_dims();
  KvPlan plan = make_kv_plan(opts("progressive", 2, 8, 1, 16), d);
  for (int h = 0; h < d.n_head_kv; ++h)
    for (KvRole role : {KvRole::key, KvRole::value}) {
      KvComponentPlan& sensitive = plan.at(0, h, role);
      sensitive.bits = 8;
      sensitive.sensitivity = {{16, 0.0}, {8, 10.0}};
      plan.at(1, h, role).sensitivity = {{16, 0.0}, {8, 1e-3}, {4, 1e-2}, {2, 1e-1}};
    }
  const int n = 300;
  // Budget 1: layer 0 at 16 bits throughout, layer 1 at its final 2 bits (but the newest page).
  KvPlan layer0_fixed = plan;
  for (int h = 0; h < d.n_head_kv; ++h)
    for (KvRole role : {KvRole::key, KvRole::value}) layer0_fixed.at(0, h, role).bits = 16;
  const size_t roomy = PagedKvCache(d, layer0_fixed, 0).byte_model().sequence_bytes_bound(n);
  // Budget 2: everything at its final bits.
  const size_t tight = PagedKvCache(d, plan, 0).byte_model().sequence_bytes_bound(n);
  for (size_t budget : {roomy, tight}) {
    PagedKvCache c(d, plan, budget);
    for (int step = 0; step < n; ++step) {  // token by token (a chunk's reservation would shrink early)
      ASSERT_TRUE(c.reserve(0, 1)) << "budget " << budget << " step " << step;
      append_all_layers(c, 0, 1, 50 + step);
    }
    int layer1_at_2 = 0;
    for (int p = 0; p < c.n_pages(0, 1); ++p) layer1_at_2 += page_current_bits(c, 0, 1, p, 0) == 2;
    EXPECT_GT(layer1_at_2, 0);
    for (int p = 0; p + 1 < c.n_pages(0, 0); ++p) {  // full pages of the sensitive layer
      for (int b = 0; b < 2 * d.n_head_kv; ++b) {
        const int bits = page_current_bits(c, 0, 0, p, b);
        EXPECT_GE(bits, 8) << "below its final width";
        if (budget == roomy) {
          EXPECT_EQ(bits, 16) << "shrunk while a cheaper shrink was left, page " << p;
        }
        if (budget == tight) {
          EXPECT_EQ(bits, 8) << "the tight budget needs every page at its final bits";
        }
      }
    }
    EXPECT_LE(c.pool().peak_used(), budget);
  }
}

// ---- sequences ------------------------------------------------------------------------------------

TEST(PagedBudget, SequencesDoNotDisturbEachOther) {
  const KvDims d = test::small_dims();
  for (const char* m : {"uniform", "kivi", "progressive", "f16"}) {
    const KvPlan plan = make_kv_plan(opts(m, 4, 8, 1, 32, m == std::string("kivi") ? 16 : 0), d);
    PagedKvCache both(d, plan, 0), alone(d, plan, 0);
    for (int step = 0; step < 12; ++step) {
      const int n = step == 0 ? 40 : 1 + step % 5;
      both.reserve(7, n);
      append_all_layers(both, 7, n, 500 + step);
      both.reserve(2, n + 3);
      append_all_layers(both, 2, n + 3, 900 + step);
      alone.reserve(7, n);
      append_all_layers(alone, 7, n, 500 + step);
      const auto q = test::random_q(1, d, step);
      for (int l = 0; l < d.n_layer; ++l) {
        std::vector<float> a((size_t)d.n_head * d.head_dim), b(a.size());
        both.attend(7, l, 1, q.data(), a.data());
        alone.attend(7, l, 1, q.data(), b.data());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << m << " step " << step;
      }
    }
  }
}

// Three sequences under a budget that holds about two at their final bits: one stops (reserve
// false), its removal frees room, the others reach their full length, the pool never passes the
// budget and the survivors still attend exactly over what they hold.
TEST(PagedBudget, KvBudgetStopsOneSequenceAndLeavesTheOthersIntact) {
  const KvDims d = test::small_dims();
  const KvPlan plan = make_kv_plan(opts("progressive", 2, 8, 1, 16), d);
  PagedKvCache probe(d, plan, 0);
  const int target = 300;
  const size_t budget = 2 * probe.byte_model().sequence_bytes_bound(target) + probe.byte_model().sequence_fixed_bytes() / 2;
  PagedKvCache c(d, plan, budget);
  c.set_q8_queries(false);  // float queries: the dequantized reference is then exact to fp32 rounding
  std::vector<std::vector<History>> hist(3, std::vector<History>(d.n_layer));
  std::vector<bool> alive(3, true);
  int stopped = -1;
  for (int t = 0; t < target; ++t) {
    for (int s = 0; s < 3; ++s) {
      if (!alive[s]) continue;
      if (!c.reserve(s, 1)) {
        EXPECT_EQ(c.length(s, 0), t) << "a failed reserve changed the sequence";
        alive[s] = false;
        stopped = s;
        c.remove(s);
        continue;
      }
      append_all_layers(c, s, 1, 1000 * s + t, &hist[s]);
      ASSERT_LE(c.pool().used() + c.pool().held(), budget);
    }
  }
  ASSERT_NE(stopped, -1) << "the budget was expected to stop one sequence";
  int survivors = 0;
  for (int s = 0; s < 3; ++s) {
    if (!alive[s]) continue;
    ++survivors;
    EXPECT_EQ(c.length(s, 0), target);
    const auto q = test::random_q(1, d, 77 + s);
    for (int l = 0; l < d.n_layer; ++l) {
      std::vector<double> K, V;
      test::dequantized_cache(c, s, l, hist[s][l], K, V);
      const auto ref = test::reference_attention(d, K, V, target, q.data(), 1);
      std::vector<float> out(ref.size());
      c.attend(s, l, 1, q.data(), out.data());
      double vmax = 0;
      for (double x : V) vmax = std::max(vmax, std::abs(x));
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], kAttendVsDequantizedRel * vmax);
    }
  }
  EXPECT_EQ(survivors, 2);
  EXPECT_LE(c.pool().peak_used(), budget);
}

// Appending without a reservation when nothing fits throws Error and leaves the pool within budget.
TEST(PagedBudget, AppendBeyondBudgetThrowsClearly) {
  const KvDims d = test::small_dims();
  auto probe = make_kv_cache(opts("uniform", 4, 0, 0, 16), d);
  const size_t budget = probe->byte_model().sequence_fixed_bytes() + 2 * (probe->byte_model().page_data_bytes(0, true) + probe->byte_model().page_metadata_bytes());
  KvCacheOptions o = opts("uniform", 4, 0, 0, 16);
  o.budget_mib = (double)budget / (1024.0 * 1024.0);
  auto c = make_kv_cache(o, d);
  append_all_layers(*c, 0, 16, 1);
  const auto k = test::random_kv(16, d, 2, true);
  try {
    c->append(0, 0, 16, k.data(), k.data());
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV budget"), std::string::npos) << e.what();
  }
  EXPECT_LE(c->bytes_used(), c->pool().budget());
  EXPECT_FALSE(c->reserve(1, 1)) << "a new sequence cannot fit either";
  EXPECT_EQ(c->length(1, 0), 0);
}

// ---- randomised ---------------------------------------------------------------------------------

// Random plans (per-component final bits), budgets, appends, removals: the pool never exceeds
// the budget, no block is below its final bits, and used bytes equal the sum over what exists.
TEST(PagedBudget, RandomisedNeverExceedsBudgetNorShrinksBelowFinalBits) {
  const KvDims d = test::small_dims();
  std::mt19937 rng(2024);
  for (int round = 0; round < 12; ++round) {
    KvPlan plan = make_kv_plan(opts("progressive", 2, 0, 0, 16), d);
    const int pages[] = {8, 16, 32};
    plan.page_tokens = pages[rng() % 3];
    plan.window = (int)(rng() % 20);
    plan.sink = (int)(rng() % 3);
    const int ladder[] = {1, 2, 4, 8, 16};
    for (auto& comp : plan.components) {
      comp.bits = ladder[rng() % 5];
      comp.quantizer = rng() % 4 == 0 ? QuantMethod::kivi : QuantMethod::uniform;
      comp.group = comp.quantizer == QuantMethod::kivi ? 8 : (rng() % 2 ? 32 : 0);
    }
    PagedKvCache probe(d, plan, 0);
    const size_t budget = probe.byte_model().sequence_fixed_bytes() * (1 + rng() % 3) +
                          (size_t)(rng() % 40 + 2) * (probe.byte_model().page_data_bytes(0, false) + probe.byte_model().page_metadata_bytes());
    PagedKvCache c(d, plan, budget);
    std::vector<int> len(4, 0);
    for (int op = 0; op < 150; ++op) {
      const int s = (int)(rng() % 4);
      if (rng() % 25 == 0) {
        c.remove(s);
        len[s] = 0;
      } else {
        const int n = rng() % 3 == 0 ? (int)(rng() % 40 + 1) : 1;
        if (c.reserve(s, n)) {
          append_all_layers(c, s, n, op);
          len[s] += n;
        }
      }
      ASSERT_LE(c.pool().used() + c.pool().held(), budget) << "round " << round << " op " << op;
      // Recount used bytes from the pages that exist, and check bits against final bits.
      size_t used = 0;
      for (int q = 0; q < 4; ++q) {
        ASSERT_EQ(c.length(q, 0), len[q]);
        for (int l = 0; l < d.n_layer && c.length(q, 0) > 0; ++l) {
          for (int p = 0; p < c.n_pages(q, l); ++p) {
            used += c.byte_model().page_metadata_bytes();
            for (int b = 0; b < 2 * d.n_head_kv; ++b) {
              KvBlockLayout L;
              c.page_block(q, l, p, b, &L);
              ASSERT_GE(L.bits, page_final_bits(c, q, l, p, b));
              ASSERT_EQ(L.bits, page_current_bits(c, q, l, p, b));
              used += L.bytes;
            }
          }
        }
      }
      ASSERT_LE(used, c.pool().used());
      ASSERT_EQ((c.pool().used() - used) % c.byte_model().sequence_fixed_bytes(), 0u) << "bytes not explained by pages and sequences";
    }
    if (round % 4 == 0) {  // attention still runs over whatever the pool holds
      for (int s = 0; s < 4; ++s) {
        if (c.length(s, 0) == 0) continue;
        const auto q = test::random_q(1, d, s);
        std::vector<float> out((size_t)d.n_head * d.head_dim);
        c.attend(s, 1, 1, q.data(), out.data());
        for (float x : out) ASSERT_TRUE(std::isfinite(x));
      }
    }
  }
}

}  // namespace
}  // namespace mpkv

// Sliding-window layers (KvDims::window, gemma3's local layers): a query at position p attends to
// positions [max(0, p - W + 1), p] only. Both caches against "dequantize everything, then attend
// within the window" in double, for several methods (fp16, packed token-axis, KIVI channel-axis,
// rotated, turbo, progressive) and every kernel variant this CPU runs, with prefill chunks and
// decode steps that put the window's first row at every offset inside sink, pages and the fp16
// recent-token buffer; and the paged cache frees the pages that fall out of a window.
#include <gtest/gtest.h>

#include <string>

#include "engine/reserve_halving.h"
#include "kvcache/f16_kv_cache.h"
#include "test_kvcache_support.h"
#include "util/cpu_features.h"

namespace mpkv {
namespace {

// The same bound as test_kvcache_paged_attention.cpp's kAttendVsDequantizedRel (the cache attends
// in fp32 over exactly the values the reference dequantizes; observed 1.2e-6 of max |V|).
constexpr double kAttendVsDequantizedRel = 5e-6;

// Layer 0 slides with a window of 13 (not a multiple of any page, group or kernel block), layer 1
// is global.
KvDims windowed_dims() { return KvDims{2, 4, 2, 64, {13, 0}}; }

KvCacheOptions method(const std::string& m, int bits, int group, int page) {
  KvCacheOptions o;
  o.method = parse_kv_method(m);
  o.bits = bits;
  o.group = group;
  o.window = m == "f16" ? 0 : 8;
  o.sink = m == "f16" ? 0 : 1;
  o.page_tokens = page;
  return o;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

// Appends the chunks to every layer of seq, attends after each, and checks every output against
// the windowed reference; also checks that layer 0's output differs from global attention once
// the sequence is longer than its window (so the check can fail).
void check_windowed(KvCache& cache, PagedKvCache* paged, const std::vector<int>& chunks, const std::string& what) {
  const KvDims d = cache.dims();
  const size_t row = (size_t)d.n_head_kv * d.head_dim;
  std::vector<test::History> hist(d.n_layer);
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const int n = chunks[ci];
    if (paged) {
      ASSERT_TRUE(paged->reserve(0, n));
    }
    for (int l = 0; l < d.n_layer; ++l) {
      const uint32_t seed = 500 + 1000 * (uint32_t)ci + 7 * l;
      const auto k = test::random_kv(n, d, seed, true), v = test::random_kv(n, d, seed + 3, false);
      const auto q = test::random_q(n, d, seed + 5);
      cache.append(0, l, n, k.data(), v.data());
      hist[l].add(n, k.data(), v.data(), row);
      std::vector<float> out(q.size());
      cache.attend(0, l, n, q.data(), out.data());
      std::vector<double> K(hist[l].k.begin(), hist[l].k.end()), V(hist[l].v.begin(), hist[l].v.end());
      if (paged) test::dequantized_cache(*paged, 0, l, hist[l], K, V);
      else
        for (size_t i = 0; i < K.size(); ++i) K[i] = test::round_fp16(hist[l].k[i]), V[i] = test::round_fp16(hist[l].v[i]);
      const auto ref = paged ? test::reference_attention_decoded(*paged, l, hist[l], K, V, q.data(), n, d.window_of(l))
                             : test::reference_attention(d, K, V, hist[l].n, q.data(), n, d.window_of(l));
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(out[i] - ref[i]));
      ASSERT_LE(worst, kAttendVsDequantizedRel * max_abs(V)) << what << " layer " << l << " after " << hist[l].n << " tokens";
      if (l == 0 && hist[l].n > 2 * d.window_of(0)) {
        const auto global = test::reference_attention(d, K, V, hist[l].n, q.data(), n, 0);
        double moved = 0;
        for (size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, std::abs(global[i] - ref[i]));
        ASSERT_GT(moved, 100 * kAttendVsDequantizedRel * max_abs(V)) << what << ": the window must matter";
      }
    }
  }
  if (!paged) return;
  // Layer 0 frees the pages that fell out of its window: what is left is at most the pages the
  // last W positions touch plus the open page; layer 1 (global) keeps every page.
  const int P = paged->plan().page_tokens, W = d.window_of(0), n = hist[0].n;
  EXPECT_LE(paged->n_pages(0, 0), (W + P - 1) / P + 2) << what;
  EXPECT_EQ(paged->n_pages(0, 1), (paged->byte_model().tokens_in_pages(1, n) + P - 1) / P) << what;
}

// Prefill chunks longer and shorter than the window, then decode steps.
const std::vector<int> kChunks = {37, 1, 1, 70, 5, 1, 1, 1, 16, 1, 300, 1, 1};

TEST(SlidingWindow, F16CacheMatchesWindowedReference) {
  F16KvCache cache(windowed_dims());
  check_windowed(cache, nullptr, kChunks, "F16KvCache");
}

TEST(SlidingWindow, PagedCacheMatchesWindowedReference) {
  std::vector<std::pair<std::string, KvCacheOptions>> cases = {
      {"f16", method("f16", 16, 0, 16)},          {"uniform4_g32", method("uniform", 4, 32, 16)},
      {"uniform2", method("uniform", 2, 0, 16)},  {"kivi2", method("kivi", 2, 8, 16)},
      {"kivi4", method("kivi", 4, 16, 32)},       {"rotated4", method("rotated", 4, 0, 16)},
      {"turbo3", method("turbo", 3, 0, 16)},      {"progressive2", method("progressive", 2, 0, 16)},
  };
  std::vector<Isa> isas{Isa::scalar};
  if (best_isa() >= Isa::avx2) isas.push_back(Isa::avx2);
  if (best_isa() >= Isa::avx512) isas.push_back(Isa::avx512);
  const KvDims d = windowed_dims();
  for (const auto& [name, opt] : cases) {
    for (Isa isa : isas) {
      PagedKvCache cache(d, make_kv_plan(opt, d), 0, paged_attention_kernels_for(isa));
      cache.set_q8_queries(false);  // float queries: the kernels' only error is fp32 rounding
      check_windowed(cache, &cache, kChunks, name + " / " + isa_name(isa));
    }
  }
}

// sequence_bytes_bound for sliding-window layers (KvByteModel::window_pages_bound): layers 0 and 2
// slide with a window of 50 (not a multiple of the 16-token page), layer 1 is global, and one
// sequence grows to n = 600 >> W.
KvDims bound_dims() { return KvDims{3, 4, 2, 64, {50, 0, 50}}; }
constexpr int kBoundTokens = 600;

// Appends one token at a time to every layer (reserving first), like decode; returns false as soon
// as a reservation fails. peak_pages[l] / peak_bytes: the most held at once.
bool grow_token_by_token(PagedKvCache& c, int n, std::vector<int>& peak_pages, size_t& peak_bytes) {
  const KvDims d = c.dims();
  peak_pages.assign(d.n_layer, 0);
  peak_bytes = 0;
  for (int t = 0; t < n; ++t) {
    if (!c.reserve(0, 1)) return false;
    for (int l = 0; l < d.n_layer; ++l) {
      const auto k = test::random_kv(1, d, 9000 + 3 * t + l, true), v = test::random_kv(1, d, 9100 + 3 * t + l, false);
      c.append(0, l, 1, k.data(), v.data());
      peak_pages[l] = std::max(peak_pages[l], c.n_pages(0, l));
    }
    peak_bytes = std::max(peak_bytes, c.bytes_used());
  }
  return true;
}

// Tight: without a budget (pages stay at their initial bits), a windowed layer's peak page count is
// the bound or one less (KIVI flushes 8 tokens at a time), and for plans whose pages are written at
// their final bits the peak bytes are at most one page per windowed layer under the bound; the old
// bound (every page) was higher by exactly the pages past window_pages_bound.
TEST(SlidingWindow, BytesBoundIsTightWithinAPagePerWindowedLayer) {
  const KvDims d = bound_dims();
  for (const auto& [name, opt] : std::vector<std::pair<std::string, KvCacheOptions>>{
           {"f16", method("f16", 16, 0, 16)},
           {"uniform4", method("uniform", 4, 0, 16)},
           {"kivi2", method("kivi", 2, 8, 16)},
           {"progressive2", method("progressive", 2, 0, 16)}}) {
    PagedKvCache c(d, make_kv_plan(opt, d), 0);
    std::vector<int> peak;
    size_t peak_bytes = 0;
    ASSERT_TRUE(grow_token_by_token(c, kBoundTokens, peak, peak_bytes)) << name;
    const int P = c.plan().page_tokens;
    for (int l : {0, 2}) {
      EXPECT_LE((size_t)peak[l], c.byte_model().window_pages_bound(l)) << name << " layer " << l;
      EXPECT_GE((size_t)peak[l] + 1, c.byte_model().window_pages_bound(l)) << name << " layer " << l;
      EXPECT_EQ(c.byte_model().pages_bound(l, kBoundTokens), c.byte_model().window_pages_bound(l)) << name;
    }
    EXPECT_EQ((size_t)peak[1], (size_t)(c.byte_model().tokens_in_pages(1, kBoundTokens) + P - 1) / P) << name;
    const size_t bound = c.byte_model().sequence_bytes_bound(kBoundTokens);
    if (!c.plan().progressive) {
      EXPECT_LE(peak_bytes, bound) << name;
      EXPECT_LE(bound - peak_bytes, 2 * (c.byte_model().page_data_bytes(0, true) + c.byte_model().page_metadata_bytes())) << name;
    }
    // Counting every page, as before: each windowed layer's extra pages at their final bits.
    KvDims global = d;
    global.window.clear();
    const size_t every_page = PagedKvCache(global, make_kv_plan(opt, global), 0).byte_model().sequence_bytes_bound(kBoundTokens);
    const size_t pages = (size_t)(c.byte_model().tokens_in_pages(0, kBoundTokens) + P - 1) / P;
    EXPECT_EQ(every_page - bound, 2 * (pages - c.byte_model().window_pages_bound(0)) *
                                      (c.byte_model().page_data_bytes(0, true) + c.byte_model().page_metadata_bytes())) << name;
  }
}

// Safe: a budget of exactly sequence_bytes_bound(n) lets the sequence reach n token by token
// (progressive: full pages shrink to their final bits to make room) and in prefill chunks halved
// while they do not fit. With every layer windowed there is no global layer's unused room: the
// pages a chunk leaves behind its window must be freed when the next positions are reserved.
TEST(SlidingWindow, BytesBoundIsSafeForALongSequence) {
  for (const KvDims& d : {bound_dims(), KvDims{2, 4, 2, 64, {50, 50}}})
  for (const auto& [name, opt] : std::vector<std::pair<std::string, KvCacheOptions>>{
           {"uniform4", method("uniform", 4, 0, 16)},
           {"kivi2", method("kivi", 2, 8, 16)},
           {"progressive2", method("progressive", 2, 0, 16)}}) {
    const KvPlan plan = make_kv_plan(opt, d);
    const size_t bound = PagedKvCache(d, plan, 0).byte_model().sequence_bytes_bound(kBoundTokens);
    {
      PagedKvCache c(d, plan, bound);
      std::vector<int> peak;
      size_t peak_bytes = 0;
      EXPECT_TRUE(grow_token_by_token(c, kBoundTokens, peak, peak_bytes)) << name << ": token by token";
      EXPECT_LE(peak_bytes, bound) << name;
    }
    {
      PagedKvCache c(d, plan, bound);
      int done = 0;
      while (done < kBoundTokens) {
        const int n = reserve_halving(c, 0, std::min(64, kBoundTokens - done));
        ASSERT_GT(n, 0) << name << ": chunked prefill stuck at " << done;
        for (int l = 0; l < d.n_layer; ++l) {
          const auto k = test::random_kv(n, d, 7000 + done + l, true), v = test::random_kv(n, d, 7100 + done + l, false);
          c.append(0, l, n, k.data(), v.data());
        }
        done += n;
      }
      EXPECT_LE(c.bytes_used(), bound) << name;
    }
  }
}

// Several sequences in a budget of exactly the sum of their bounds, prefilled one after another in
// chunks of 64 (more than the window of 50), as `mpkv bench` fills its sequences and a server
// prefills the requests it admitted: after its last chunk a sequence still holds the pages that
// chunk's own queries read behind the window, over its bound, until a later reservation frees
// them. The next sequence's reservation must free them (no pass is in flight between
// reservations), not fail: the plans here cannot shrink, so nothing else can make that room.
TEST(SlidingWindow, BoundsOfSeveralSequencesHoldWhenPrefilledInTurn) {
  const KvDims d = bound_dims();
  constexpr int kSeqs = 3;
  for (const auto& [name, opt] : std::vector<std::pair<std::string, KvCacheOptions>>{
           {"f16", method("f16", 16, 0, 16)},
           {"uniform4", method("uniform", 4, 0, 16)},
           {"kivi2", method("kivi", 2, 8, 16)}}) {
    const KvPlan plan = make_kv_plan(opt, d);
    const size_t bound = PagedKvCache(d, plan, 0).byte_model().sequence_bytes_bound(kBoundTokens);
    PagedKvCache c(d, plan, kSeqs * bound);
    for (int s = 0; s < kSeqs; ++s) {
      for (int done = 0; done < kBoundTokens;) {
        const int n = reserve_halving(c, s, std::min(64, kBoundTokens - done));
        ASSERT_GT(n, 0) << name << ": sequence " << s << " stuck at " << done;
        for (int l = 0; l < d.n_layer; ++l) {
          const auto k = test::random_kv(n, d, 7200 + done + l, true), v = test::random_kv(n, d, 7300 + done + l, false);
          c.append(s, l, n, k.data(), v.data());
        }
        done += n;
      }
    }
    EXPECT_LE(c.bytes_used(), kSeqs * bound) << name;
    for (int s = 0; s < kSeqs; ++s) EXPECT_EQ(c.length(s, 0), kBoundTokens) << name;
  }
}

TEST(SlidingWindow, WrongWindowListIsAnInternalError) {
  EXPECT_THROW(F16KvCache(KvDims{2, 4, 2, 64, {13}}), InternalError);
  EXPECT_THROW(F16KvCache(KvDims{2, 4, 2, 64, {13, -1}}), InternalError);
}

}  // namespace
}  // namespace mpkv

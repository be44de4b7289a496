// The prefix cache inside PagedKvCache (paged_kv_cache_prefix.cpp, prefix_index.h; docs/serving.md
// "Prefix cache"), on random K/V rows:
//   - a sequence that reads cached pages attends exactly (bit for bit) like a fresh sequence that
//     appended the same rows itself, for f16 and every quantizer;
//   - one reading cached pages that were shrunk while cold attends exactly like a fresh sequence
//     whose own pages were shrunk to the same bits (the reference is built with shrink_page_to);
//   - make-room order: cold pages shrink to the floor first, then cold blocks are evicted (tail
//     first), and only then pages sequences read shrink;
//   - sliding-window layers, hash collisions of different prefixes, and a randomized run of
//     attach / append / publish / remove that never exceeds the budget, never frees a page a
//     sequence reads, and whose byte and reference counts are recounted after every operation.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/reserve_halving.h"
#include "kvcache/kv_cache_factory.h"
#include "kvcache/paged_kv_cache.h"
#include "test_kvcache_inspection.h"
#include "test_kvcache_support.h"

namespace mpkv {
namespace {

KvCacheOptions opts(const std::string& method, int bits, int window, int sink, int page, double budget_mib) {
  KvCacheOptions o = test::cache_options(method, bits, window, sink, page);
  o.budget_mib = budget_mib;
  return o;
}

// Rows [0, n) of a fixed random history, the same for every sequence of a test.
struct Rows {
  std::vector<std::vector<float>> k, v;  // [layer][n * row]
  size_t row = 0;
  Rows(const KvDims& d, int n, uint32_t seed) : row((size_t)d.n_head_kv * d.head_dim) {
    for (int l = 0; l < d.n_layer; ++l) {
      k.push_back(test::random_kv(n, d, seed * 131 + l, true));
      v.push_back(test::random_kv(n, d, seed * 131 + l + 57, false));
    }
  }
};

// Appends rows [from, to) of `r` to seq in every layer (one chunk, reserved first).
void append_rows(PagedKvCache& c, int seq, const Rows& r, int from, int to) {
  ASSERT_TRUE(c.reserve(seq, to - from));
  for (int l = 0; l < c.dims().n_layer; ++l)
    c.append(seq, l, to - from, r.k[l].data() + from * r.row, r.v[l].data() + from * r.row);
}

// Attention of the last n_q positions of seq in every layer, concatenated.
std::vector<float> attend_all(PagedKvCache& c, int seq, int n_q, uint32_t seed) {
  const KvDims& d = c.dims();
  std::vector<float> all;
  for (int l = 0; l < d.n_layer; ++l) {
    const auto q = test::random_q(n_q, d, seed + l);
    std::vector<float> out(q.size());
    c.attend(seq, l, n_q, q.data(), out.data());
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

// A reader (seq `reader`, matched positions attached) and a fresh sequence (`fresh`) holding the
// same n rows: the reader's queries from the first whose fp16 rows all lie at or after the match
// (decoded_fp16_from in every layer) read exactly what the fresh sequence's queries read. The ones
// before read the cached pages' codes for positions a fresh sequence, decoding, still reads at fp16
// (docs/numerics.md, "Prefill chunks"), so for a quantized plan their outputs differ.
void expect_reader_reads_like_fresh(PagedKvCache& c, int reader, int fresh, int matched, int n, uint32_t seed,
                                    const std::string& what) {
  int first = matched;
  for (int l = 0; l < c.dims().n_layer; ++l)
    while (test::decoded_fp16_from(c, l, first) < matched) ++first;
  ASSERT_LT(first, n) << what << ": no query reads past the match";
  const auto got = attend_all(c, reader, n - first, seed), want = attend_all(c, fresh, n - first, seed);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
  if (first > matched) {
    const auto early = attend_all(c, reader, n - matched, seed), early_fresh = attend_all(c, fresh, n - matched, seed);
    EXPECT_NE(0, std::memcmp(early.data(), early_fresh.data(), early.size() * sizeof(float)))
        << what << ": the first queries read codes where a fresh sequence reads fp16";
  }
}

std::vector<int32_t> token_ids(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 5 + (i * 37 + salt * 1009) % 30000;
  return t;
}

struct Case {
  std::string method;
  int bits, window, sink;
};
const Case kCases[] = {{"f16", 16, 0, 0}, {"uniform", 4, 16, 1}, {"uniform", 2, 16, 1}, {"kivi", 2, 32, 1},
                       {"rotated", 4, 16, 1}, {"turbo", 3, 16, 1}, {"progressive", 2, 16, 1}};

std::string name(const Case& c) { return c.method + "-" + std::to_string(c.bits); }

TEST(PrefixCache, ReaderAttendsExactlyLikeAFreshSequence) {
  const KvDims d = test::small_dims();
  for (const Case& cs : kCases) {
    auto c = make_kv_cache(opts(cs.method, cs.bits, cs.window, cs.sink, 32, 64), d);
    c->enable_prefix_cache(0);
    const Rows r(d, 200, 3);
    const auto toks = token_ids(200, 1);
    append_rows(*c, 0, r, 0, 150);  // the first request: 150 positions
    c->publish_prefix(0, toks.data(), 150);
    c->remove(0);
    const int matched = c->attach_prefix(1, toks.data(), 200);
    const int full_pages = (150 - cs.sink - cs.window) / 32;  // pages the first request filled
    EXPECT_EQ(matched, cs.sink + full_pages * 32) << name(cs);
    append_rows(*c, 1, r, matched, 200);
    append_rows(*c, 2, r, 0, 200);  // the reference: every row its own
    EXPECT_EQ(c->length(1, 0), 200);
    expect_reader_reads_like_fresh(*c, 1, 2, matched, 200, 9, name(cs));
    check_consistency(*c);
    c->remove(1);
    c->remove(2);
    check_consistency(*c);
    // Both sequences gone: only cached blocks remain, every one cold.
    const PrefixCacheStats st = c->prefix_stats();
    EXPECT_EQ(st.blocks, st.cold_blocks) << name(cs);
    EXPECT_EQ(c->bytes_used(), st.cold_bytes) << name(cs);
    EXPECT_EQ(c->prefix_pinned_bytes(), 0u) << name(cs);
  }
}

// Cold pages shrink to the floor under pressure; a later reader sees them at that width. The
// reference: a fresh sequence appends the same rows and its first pages are shrunk to the same
// bits by shrink_page_to.
TEST(PrefixCache, ReaderOfShrunkPagesEqualsOwnPagesShrunkTheSameWay) {
  const KvDims d = test::small_dims();
  for (int floor : {8, 4, 2}) {
    auto c = make_kv_cache(opts("progressive", 2, 16, 1, 32, 64), d);
    c->enable_prefix_cache(floor);
    const Rows r(d, 180, 5);
    const auto toks = token_ids(180, 2);
    append_rows(*c, 0, r, 0, 150);
    c->publish_prefix(0, toks.data(), 150);
    c->remove(0);
    // Free one byte at a time while some cached page is above the floor: only cold shrinks happen.
    while (c->prefix_stats().pages_by_bits.rbegin()->first > floor) ASSERT_GT(c->shrink(1), 0u);
    EXPECT_EQ(c->prefix_stats().evictions, 0u);
    const int matched = c->attach_prefix(1, toks.data(), 180);
    ASSERT_EQ(matched, 1 + 4 * 32);
    EXPECT_EQ(page_current_bits(*c, 1, 0, 0, 0), floor);
    append_rows(*c, 1, r, matched, 180);
    append_rows(*c, 2, r, 0, 180);
    for (int l = 0; l < d.n_layer; ++l)
      for (int p = 0; p < 4; ++p) shrink_page_to(*c, 2, l, p, floor);
    expect_reader_reads_like_fresh(*c, 1, 2, matched, 180, 11, "floor " + std::to_string(floor));
    check_consistency(*c);
  }
}

// Make-room order: (a) cold pages shrink to the floor, (b) cold blocks are evicted, the chain's
// tail first, (c) only then pages a sequence reads shrink.
TEST(PrefixCache, ColdShrinksThenEvictsBeforeRunningPagesShrink) {
  const KvDims d = test::small_dims();
  auto c = make_kv_cache(opts("progressive", 2, 16, 1, 32, 64), d);
  c->enable_prefix_cache(4);
  const Rows r(d, 300, 7);
  const auto cold_toks = token_ids(150, 3), hot_toks = token_ids(150, 4);
  append_rows(*c, 0, r, 0, 150);
  c->publish_prefix(0, cold_toks.data(), 150);
  c->remove(0);                      // 4 cold blocks
  append_rows(*c, 1, r, 0, 150);     // a running sequence with 4 full pages per layer
  c->publish_prefix(1, hot_toks.data(), 150);
  const size_t cold0 = c->prefix_stats().cold_bytes;
  // (a) the first bytes come from cold pages going to 4 bits; the running pages stay at 16.
  while (c->pool().shrinkable_pages(ShrinkQueue::cold) > 0) {
    ASSERT_GT(c->shrink(1), 0u);
    ASSERT_EQ(page_current_bits(*c, 1, 0, 0, 0), 16) << "a page a sequence reads shrank before cold ones reached the floor";
    ASSERT_EQ(c->prefix_stats().evictions, 0u);
  }
  const std::map<int, size_t> by_bits = c->prefix_stats().pages_by_bits;  // 4 blocks x 2 layers each
  EXPECT_EQ(by_bits.at(4), 8u);
  EXPECT_EQ(by_bits.at(16), 8u);
  EXPECT_LT(c->prefix_stats().cold_bytes, cold0);
  // (b) next: evictions, the deepest cold block first, while the running pages stay at 16.
  c->shrink(1);
  EXPECT_EQ(c->prefix_stats().evictions, 1u);
  EXPECT_EQ(c->prefix_match(cold_toks.data(), 150).tokens, 1 + 3 * 32) << "the tail block goes first";
  EXPECT_EQ(page_current_bits(*c, 1, 0, 0, 0), 16);
  while (c->prefix_stats().cold_blocks > 0) c->shrink(1);
  EXPECT_EQ(page_current_bits(*c, 1, 0, 0, 0), 16);
  EXPECT_EQ(c->prefix_stats().cold_bytes, 0u);
  // (c) then the running sequence's pages.
  EXPECT_GT(c->shrink(1), 0u);
  EXPECT_LT(page_current_bits(*c, 1, 0, 0, 0), 16);
  check_consistency(*c);
}

// Two sequences fill the same prefix at once (one system prompt prefilled in one step): the second
// to publish reads the first one's pages and frees its own copies, and attends as before.
TEST(PrefixCache, ADuplicateBlockIsReadFromTheCacheAndItsCopyFreed) {
  const KvDims d = test::small_dims();
  for (const Case& cs : {Case{"f16", 16, 0, 0}, Case{"uniform", 4, 16, 1}}) {
    auto c = make_kv_cache(opts(cs.method, cs.bits, cs.window, cs.sink, 32, 64), d);
    c->enable_prefix_cache(0);
    const Rows r(d, 150, 12);
    const auto toks = token_ids(150, 8);
    append_rows(*c, 0, r, 0, 150);
    append_rows(*c, 1, r, 0, 150);
    const auto before = attend_all(*c, 1, 20, 17);
    c->publish_prefix(0, toks.data(), 150);
    const size_t used = c->bytes_used();
    const PrefixCacheStats st = c->prefix_stats();
    c->publish_prefix(1, toks.data(), 150);
    EXPECT_EQ(c->prefix_stats().blocks, st.blocks) << name(cs) << ": no second copy cached";
    const size_t block_pages = st.bytes - st.blocks * c->byte_model().prefix_block_record_bytes(1) -
                               (c->byte_model().prefix_block_record_bytes(0) - c->byte_model().prefix_block_record_bytes(1));
    EXPECT_EQ(c->bytes_used(), used - block_pages) << name(cs) << ": its own copies are freed";
    const auto after = attend_all(*c, 1, 20, 17);
    EXPECT_EQ(0, std::memcmp(before.data(), after.data(), before.size() * sizeof(float))) << name(cs);
    check_consistency(*c);
    c->remove(0);
    c->remove(1);
    check_consistency(*c);
    EXPECT_EQ(c->bytes_used(), c->prefix_stats().cold_bytes);
  }
}

TEST(PrefixCache, FloorSixteenNeverShrinksColdPages) {
  const KvDims d = test::small_dims();
  auto c = make_kv_cache(opts("progressive", 2, 16, 1, 32, 64), d);
  c->enable_prefix_cache(16);
  const Rows r(d, 150, 8);
  const auto toks = token_ids(150, 5);
  append_rows(*c, 0, r, 0, 150);
  c->publish_prefix(0, toks.data(), 150);
  c->remove(0);
  c->shrink(1);
  EXPECT_EQ(c->prefix_stats().evictions, 1u);
  EXPECT_EQ(c->prefix_stats().cold_halvings, 0u);
  EXPECT_EQ(c->prefix_stats().pages_by_bits.begin()->first, 16);
}

TEST(PrefixCache, DivergentTokensMatchOnlyTheCommonPages) {
  const KvDims d = test::small_dims();
  auto c = make_kv_cache(opts("uniform", 4, 16, 1, 32, 64), d);
  c->enable_prefix_cache(0);
  const Rows r(d, 200, 9);
  auto toks = token_ids(200, 6);
  append_rows(*c, 0, r, 0, 200);
  c->publish_prefix(0, toks.data(), 200);
  EXPECT_EQ(c->prefix_match(toks.data(), 200).tokens, 1 + 5 * 32);
  auto other = toks;
  other[1 + 2 * 32 + 5] += 1;  // inside block 2
  EXPECT_EQ(c->prefix_match(other.data(), 200).tokens, 1 + 2 * 32);
  other[0] += 1;  // the sink token belongs to block 0
  EXPECT_EQ(c->prefix_match(other.data(), 200).tokens, 0);
  // Only pages a sequence of n tokens would have filled itself: its last `window` (16) positions
  // stay out, so block 2 (positions up to 1 + 3 * 32) needs n >= 1 + 3 * 32 + 16.
  EXPECT_EQ(c->prefix_match(toks.data(), 1 + 3 * 32 + 15).tokens, 1 + 2 * 32);
  EXPECT_EQ(c->prefix_match(toks.data(), 1 + 3 * 32 + 16).tokens, 1 + 3 * 32);
}

TEST(PrefixCache, NeedsABudgetAndAValidFloor) {
  const KvDims d = test::small_dims();
  EXPECT_THROW(make_kv_cache(opts("uniform", 4, 16, 1, 32, 0), d)->enable_prefix_cache(0), Error);
  EXPECT_THROW(make_kv_cache(opts("uniform", 4, 16, 1, 32, 8), d)->enable_prefix_cache(3), Error);
}

// Sliding-window layers: a reader skips the pages before its first query's window (they need not
// be cached) and reads the rest; its attention equals a fresh sequence's.
TEST(PrefixCache, SlidingWindowLayersReadOnlyPagesInsideTheWindow) {
  const KvDims d(2, 4, 2, 64, {48, 0});  // layer 0 slides over 48 positions
  for (const Case& cs : {Case{"f16", 16, 0, 0}, Case{"uniform", 4, 16, 1}}) {
    auto c = make_kv_cache(opts(cs.method, cs.bits, cs.window, cs.sink, 16, 64), d);
    c->enable_prefix_cache(0);
    const Rows r(d, 260, 10);
    const auto toks = token_ids(260, 7);
    append_rows(*c, 0, r, 0, 200);
    c->publish_prefix(0, toks.data(), 200);
    c->remove(0);
    const int matched = c->attach_prefix(1, toks.data(), 260);
    EXPECT_GT(matched, 100) << name(cs);
    EXPECT_LT(c->n_pages(1, 0), c->n_pages(1, 1)) << name(cs) << ": the sliding layer reads fewer pages";
    append_rows(*c, 1, r, matched, 260);
    append_rows(*c, 2, r, 0, 260);
    expect_reader_reads_like_fresh(*c, 1, 2, matched, 260, 13, name(cs));
    check_consistency(*c);
  }
}

// Random attach / append / publish / remove (finished or aborted mid-prefill) under a budget that
// forces shrinks and evictions: never over budget, never a freed page read (check_consistency
// recounts every byte and reference; ASan builds catch a use after free), and at the end, with
// every sequence gone, the pool holds exactly the cold cached bytes.
TEST(PrefixCache, RandomisedNeverExceedsBudgetNorFreesAReadPage) {
  const KvDims d = test::small_dims();
  // Budgets: a few sequences' fp16 buffers plus a fraction of the three conversations' pages.
  for (const auto& [cs, mib] : {std::pair{Case{"progressive", 2, 16, 1}, 1.0}, std::pair{Case{"f16", 16, 0, 0}, 1.0},
                                std::pair{Case{"kivi", 2, 32, 1}, 0.45}}) {
    auto c = make_kv_cache(opts(cs.method, cs.bits, cs.window, cs.sink, 32, mib), d);
    c->enable_prefix_cache(cs.method == "progressive" ? 4 : 0);
    const Rows r(d, 400, 11);
    std::mt19937 rng(42);
    struct Live {
      int seq, n, target;
      std::vector<int32_t> toks;
    };
    std::vector<Live> live;
    int next_seq = 0, attached = 0;
    for (int op = 0; op < 600; ++op) {
      const int kind = (int)(rng() % 10);
      if (kind < 3 && live.size() < 6) {  // a new sequence: one of 3 conversations, some length
        Live s{next_seq++, 0, 64 + (int)(rng() % 330), token_ids(400, (int)(rng() % 3))};
        s.n = c->attach_prefix(s.seq, s.toks.data(), s.target);
        attached += s.n > 0;
        live.push_back(s);
      } else if (kind < 8 && !live.empty()) {  // a chunk of one sequence
        Live& s = live[rng() % live.size()];
        const int m = std::min(s.target - s.n, 1 + (int)(rng() % 48));
        if (m > 0 && reserve_halving(*c, s.seq, m) == m) {
          for (int l = 0; l < d.n_layer; ++l)
            c->append(s.seq, l, m, r.k[l].data() + s.n * r.row, r.v[l].data() + s.n * r.row);
          s.n += m;
          c->publish_prefix(s.seq, s.toks.data(), s.n);
        }
      } else if (!live.empty()) {  // finished or aborted, whatever its progress
        const size_t i = rng() % live.size();
        c->remove(live[i].seq);
        live.erase(live.begin() + (long)i);
      }
      ASSERT_LE(c->bytes_used() + c->pool().held(), c->budget_bytes()) << name(cs) << " op " << op;
      ASSERT_NO_THROW(check_consistency(*c)) << name(cs) << " op " << op;
    }
    EXPECT_GT(attached, 10) << name(cs);
    EXPECT_GT(c->prefix_stats().evictions, 0u) << name(cs);
    for (const Live& s : live) c->remove(s.seq);
    check_consistency(*c);
    EXPECT_EQ(c->bytes_used(), c->prefix_stats().cold_bytes) << name(cs);
    EXPECT_EQ(c->prefix_pinned_bytes(), 0u) << name(cs);
  }
}

}  // namespace
}  // namespace mpkv

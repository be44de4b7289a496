// Attention results of one query must not depend on which other queries or sequences share the
// call, nor on the thread count (docs/design.md §12: greedy output must be the same at -t 1/2/3 and
// alone vs in a batch). Bitwise equality, for every cache method, every kernel variant this CPU runs, and
// both float and int8 queries.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>

#include "kvcache/f16_kv_cache.h"
#include "test_kvcache_support.h"
#include "util/cpu_features.h"

namespace mpkv {
namespace {

constexpr int kContext = 300;  // spans several 16-token pages, the window and a 256-row kernel segment
constexpr int kMaxQueries = 17;

KvCacheOptions options(const std::string& method, int bits, int group = 0) {
  KvCacheOptions o;
  o.method = parse_kv_method(method);
  o.bits = bits;
  o.group = group;
  o.window = 8;
  o.sink = 1;
  o.page_tokens = 16;
  return o;
}

std::vector<std::pair<std::string, KvCacheOptions>> cases() {
  return {{"f16", options("f16", 16)},          {"uniform2", options("uniform", 2)},
          {"uniform4", options("uniform", 4)},  {"uniform8_g16", options("uniform", 8, 16)},
          {"uniform16", options("uniform", 16)}, {"kivi2", options("kivi", 2, 8)},
          {"rotated4", options("rotated", 4)},  {"turbo2", options("turbo", 2)}};
}

// Fills seq with kContext tokens in every layer.
void fill(KvCache& c, int seq, uint32_t seed) {
  const KvDims d = c.dims();
  for (int l = 0; l < d.n_layer; ++l) {
    const auto k = test::random_kv(kContext, d, seed + 7 * l, true);
    const auto v = test::random_kv(kContext, d, seed + 7 * l + 3, false);
    c.append(seq, l, kContext, k.data(), v.data());
  }
}

// out rows of attend(seq, layer 1, n) for the last n of kMaxQueries query rows.
std::vector<float> attend_last(KvCache& c, int seq, const std::vector<float>& q, int n) {
  const size_t row = (size_t)c.dims().n_head * c.dims().head_dim;
  std::vector<float> out((size_t)n * row);
  c.attend(seq, 1, n, q.data() + (size_t)(kMaxQueries - n) * row, out.data());
  return out;
}

// The query of row kMaxQueries - 1 - back sees kContext - back positions whatever n is; its output
// for n = 1 + back (it is the first query) must equal its output for every larger n, at 1 and 3 threads.
void expect_invariant(KvCache& c, const std::string& what) {
  const KvDims d = c.dims();
  const size_t row = (size_t)d.n_head * d.head_dim;
  fill(c, 5, 11);
  const std::vector<float> q = test::random_q(kMaxQueries, d, 99);
  const int saved = omp_get_max_threads();
  for (int back : {0, 4}) {
    omp_set_num_threads(1);
    const std::vector<float> alone = attend_last(c, 5, q, 1 + back);
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      for (int n = 1 + back; n <= kMaxQueries; ++n) {
        const std::vector<float> out = attend_last(c, 5, q, n);
        const float* got = out.data() + (size_t)(n - 1 - back) * row;
        for (size_t i = 0; i < row; ++i) {
          ASSERT_EQ(got[i], alone[i]) << what << ": query " << back << " from the end, " << n << " queries, "
                                      << threads << " threads, element " << i;
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::scalar};
  if (best_isa() >= Isa::avx2) v.push_back(Isa::avx2);
  if (best_isa() >= Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

TEST(AttendInvariance, PagedQueryResultIndependentOfOtherQueriesAndThreads) {
  const KvDims d = test::small_dims();
  for (const auto& [name, opt] : cases()) {
    for (Isa isa : isas()) {
      for (bool q8 : {false, true}) {
        PagedKvCache cache(d, make_kv_plan(opt, d), 0, paged_attention_kernels_for(isa));
        cache.set_q8_queries(q8);
        expect_invariant(cache, name + " / " + isa_name(isa) + (q8 ? " / int8 queries" : " / float queries"));
      }
    }
  }
}

TEST(AttendInvariance, F16CacheQueryResultIndependentOfOtherQueriesAndThreads) {
  F16KvCache cache(test::small_dims());
  expect_invariant(cache, "F16KvCache");
}

// attend_batch over three sequences (one decode token, one 5-token chunk, one decode token) gives
// each span the rows it gets from attend() alone, at 1-3 threads.
TEST(AttendInvariance, BatchOfSequencesEqualsEachAlone) {
  const KvDims d = test::small_dims();
  const size_t row = (size_t)d.n_head * d.head_dim;
  for (const auto& [name, opt] : cases()) {
    PagedKvCache cache(d, make_kv_plan(opt, d), 0);
    for (int s = 0; s < 3; ++s) fill(cache, s, 20 + 10 * s);
    const std::vector<AttendSpan> spans = {{0, 0, 1}, {1, 1, 5}, {2, 6, 1}};
    const std::vector<float> q = test::random_q(7, d, 5);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    std::vector<float> alone(7 * row);
    for (const AttendSpan& s : spans) cache.attend(s.seq, 1, s.n_tokens, q.data() + s.row0 * row, alone.data() + s.row0 * row);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> out(7 * row);
      cache.attend_batch(1, spans, q.data(), out.data());
      ASSERT_EQ(0, std::memcmp(out.data(), alone.data(), out.size() * sizeof(float))) << name << " threads " << threads;
    }
    omp_set_num_threads(saved);
  }
}

}  // namespace
}  // namespace mpkv

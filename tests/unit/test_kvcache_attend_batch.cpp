// PagedKvCache::attend_batch (paged_kv_cache_attend.cpp): every span of a batch gets bitwise the
// output it gets alone, whatever the other spans are and however many threads run; the base
// class's default (attend per span) gives the same.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "test_kvcache_support.h"

namespace mpkv {
namespace {

struct FilledCache {
  std::unique_ptr<PagedKvCache> cache;
  std::vector<int> lengths;
};

// Three sequences of different lengths (one longer than a work unit's 1024 rows) in layer 0 and 1.
FilledCache filled(const std::string& method, int bits) {
  const KvDims d = test::small_dims();
  KvCacheOptions o;
  o.method = parse_kv_method(method);
  o.bits = bits;
  o.window = 16;
  o.page_tokens = 32;
  FilledCache s{make_kv_cache(o, d), {40, 1300, 7}};
  for (int seq = 0; seq < 3; ++seq) {
    const int n = s.lengths[seq];
    EXPECT_TRUE(s.cache->reserve(seq, n));
    for (int l = 0; l < d.n_layer; ++l) {
      const auto k = test::random_kv(n, d, 100 + seq * 10 + l, true), v = test::random_kv(n, d, 200 + seq * 10 + l, false);
      s.cache->append(seq, l, n, k.data(), v.data());
    }
  }
  return s;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class AttendBatch : public ::testing::TestWithParam<std::pair<const char*, int>> {};

TEST_P(AttendBatch, EachSpanEqualsItselfAloneAtAnyThreadCount) {
  const auto [method, bits] = GetParam();
  FilledCache s = filled(method, bits);
  const KvDims d = test::small_dims();
  const size_t row = (size_t)d.n_head * d.head_dim;
  // Queries: the last 5, 1 and 3 positions of the three sequences, back to back in one batch.
  const std::vector<AttendSpan> spans = {{0, 0, 5}, {1, 5, 1}, {2, 6, 3}};
  const auto q = test::random_q(9, d, 77);
  for (int layer = 0; layer < d.n_layer; ++layer) {
    std::vector<float> alone(9 * row);
    for (const AttendSpan& sp : spans) s.cache->attend(sp.seq, layer, sp.n_tokens, q.data() + sp.row0 * row, alone.data() + sp.row0 * row);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> batched(9 * row, -1.0f);
      s.cache->attend_batch(layer, spans, q.data(), batched.data());
      EXPECT_TRUE(bitwise_equal(batched, alone)) << method << " layer " << layer << " threads " << threads;
      // Spans in another order and with a neighbour missing change nothing either.
      std::vector<float> reordered(9 * row, -1.0f);
      s.cache->attend_batch(layer, {spans[2], spans[0]}, q.data(), reordered.data());
      for (int r : {0, 1, 2, 3, 4, 6, 7, 8})
        EXPECT_EQ(std::memcmp(reordered.data() + r * row, alone.data() + r * row, row * sizeof(float)), 0) << r;
    }
  }
  omp_set_num_threads(omp_get_num_procs());
}

INSTANTIATE_TEST_SUITE_P(Methods, AttendBatch,
                         ::testing::Values(std::make_pair("f16", 16), std::make_pair("uniform", 4),
                                           std::make_pair("kivi", 2), std::make_pair("rotated", 4)),
                         [](const auto& info) { return std::string(info.param.first); });

}  // namespace
}  // namespace mpkv

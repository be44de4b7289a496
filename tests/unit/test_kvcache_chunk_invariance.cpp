// A query's attention output must not depend on how the prompt was cut into prefill chunks
// (docs/numerics.md, "Prefill chunks"): each query of a chunk reads what it would read if the
// tokens had been decoded one at a time -- fp16 for its own window (the rows a 1-token append would
// not yet have flushed) and the sink, its pages' codes below -- even though the chunk's append has
// already flushed some of those rows into pages. Bitwise, for paged methods with small windows,
// global and sliding-window layers, per-layer fp16 windows, float and int8 queries.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_kvcache_support.h"

namespace mpkv {
namespace {

constexpr int kTokens = 150;  // several 16-token pages past a window of 8 (and a sink of 2)

// Attention outputs of every position of sequence 3, every layer, when the kTokens positions are
// appended and attended `chunk` at a time: [layer][kTokens * n_head * head_dim].
std::vector<std::vector<float>> outputs_by_chunk(PagedKvCache& c, int chunk) {
  const KvDims& d = c.dims();
  const size_t kv_row = (size_t)d.n_head_kv * d.head_dim, q_row = (size_t)d.n_head * d.head_dim;
  std::vector<std::vector<float>> out(d.n_layer, std::vector<float>(kTokens * q_row));
  std::vector<std::vector<float>> k(d.n_layer), v(d.n_layer), q(d.n_layer);
  for (int l = 0; l < d.n_layer; ++l) {
    k[l] = test::random_kv(kTokens, d, 100 + l, true);
    v[l] = test::random_kv(kTokens, d, 200 + l, false);
    q[l] = test::random_q(kTokens, d, 300 + l);
  }
  for (int t = 0; t < kTokens; t += chunk) {
    const int m = std::min(chunk, kTokens - t);
    // The forward pass's order: each layer appends the chunk, then attends it.
    for (int l = 0; l < d.n_layer; ++l) {
      c.append(3, l, m, k[l].data() + t * kv_row, v[l].data() + t * kv_row);
      c.attend(3, l, m, q[l].data() + t * q_row, out[l].data() + t * q_row);
    }
  }
  return out;
}

struct Case {
  std::string name;
  KvDims dims;
  KvPlan plan;
};

std::vector<Case> cases() {
  const KvDims global = test::small_dims();
  const KvDims sliding(2, 4, 2, 64, {0, 24});  // layer 1 sees the last 24 positions
  auto plan = [](const KvDims& d, const std::string& method, int group, std::vector<int> layer_windows = {},
                 int sink = 2) {
    KvPlan p = make_kv_plan(test::cache_options(method, 2, 8, sink, 16, group), d);
    p.layer_windows = std::move(layer_windows);
    return p;
  };
  return {{"kivi2 (token group 8)", global, plan(global, "kivi", 8)},
          {"uniform2", global, plan(global, "uniform", 0)},
          {"progressive2", global, plan(global, "progressive", 0)},
          {"turbo2", global, plan(global, "turbo", 0)},
          {"kivi2, layer windows 8 / 3", global, plan(global, "kivi", 8, {8, 3})},
          {"uniform2, layer windows 5 / 8", global, plan(global, "uniform", 0, {5, 8})},
          {"kivi2, sliding layer", sliding, plan(sliding, "kivi", 8)},
          {"uniform2, sliding layer", sliding, plan(sliding, "uniform", 0)},
          // A sink longer than a chunk: the first chunk of 7 lies wholly in the sink, so its
          // append stages no window row at all.
          {"kivi2, sink 12", global, plan(global, "kivi", 8, {}, 12)},
          {"uniform2, sink 12", global, plan(global, "uniform", 0, {}, 12)}};
}

TEST(ChunkInvariance, PrefillChunksReadWhatDecodingReads) {
  const KvDims& d = test::small_dims();
  const size_t q_row = (size_t)d.n_head * d.head_dim;
  for (const Case& c : cases()) {
    for (bool q8 : {false, true}) {
      const std::string what = c.name + (q8 ? ", int8 queries" : ", float queries");
      PagedKvCache decoded(c.dims, c.plan, 0);
      decoded.set_q8_queries(q8);
      const auto want = outputs_by_chunk(decoded, 1);
      for (int chunk : {7, 29, kTokens}) {
        PagedKvCache chunked(c.dims, c.plan, 0);
        chunked.set_q8_queries(q8);
        const auto got = outputs_by_chunk(chunked, chunk);
        // The first position whose output differs, per layer (one failure line per layer).
        for (int l = 0; l < c.dims.n_layer; ++l) {
          int p = 0;
          while (p < kTokens &&
                 std::memcmp(got[l].data() + p * q_row, want[l].data() + p * q_row, q_row * sizeof(float)) == 0)
            ++p;
          EXPECT_EQ(p, kTokens) << what << ": chunks of " << chunk << ", layer " << l << " differs first at position " << p;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mpkv

// Stored bytes of a progressive KV cache against fixed caches of the same final bits, per sequence
// length (every cache in a comparison holds the same bytes: docs/calibration.md, "Equal bytes at a
// shorter length"; the figures: docs/results/calibration.md, "Stored bytes of progressive caches").
// No model and no timing: one sequence of SmolLM2-135M's KV shape (30 layers, 3 KV heads,
// head_dim 64) is decoded token by token with random keys and values into
//   uniform K3/V3, uniform K4/V2          fixed widths, no budget
//   progressive K4/V2                     pages from 16 bits, under the budget `mpkv ppl` / `mpkv eval`
//                                         give it for that length (run_budget_mib: every full page
//                                         at its final bits)
// and the cache's own byte count is printed at the end, as `mpkv eval`'s stored bits per element
// (bytes * 8 over the n - 1 positions x layers x KV heads x head_dim x K and V it holds), with the
// progressive excess over fixed K4/V2 and what one newest page per (layer, KV head, K|V) at 16
// instead of its final bits accounts for.
//
// The same with 16-token pages shows the excess shrinking with the page (the metadata grows).
//
// Usage: bench_kv_bytes [LEN ...]   (default 512 2048 8192)
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kv_cache_factory.h"
#include "kvcache/paged_kv_cache.h"
#include "kvcache/run_budget.h"
#include "util/error.h"

namespace {

const mpkv::KvDims kSmolLm2{30, 9, 3, 64};

// Bytes held after n - 1 tokens decoded one at a time (the eval's decode protocol holds n - 1).
size_t bytes_after(const mpkv::KvCacheOptions& o, int n) {
  auto cache = mpkv::make_kv_cache(o, kSmolLm2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> k(kSmolLm2.n_head_kv * kSmolLm2.head_dim), v(k.size());
  for (int t = 0; t + 1 < n; ++t) {
    MPKV_CHECK(cache->reserve(0, 1), "bench_kv_bytes: the budget cannot hold position " + std::to_string(t));
    for (int l = 0; l < kSmolLm2.n_layer; ++l) {
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      cache->append(0, l, 1, k.data(), v.data());
    }
  }
  return cache->bytes_used();
}

mpkv::KvCacheOptions kv(const char* method, int kb, int vb, int page_tokens = 0) {
  mpkv::KvCacheOptions o;
  o.page_tokens = page_tokens;
  o.method = mpkv::parse_kv_method(method);
  o.k_bits = kb;
  o.v_bits = vb;
  o.bits = vb;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<int> lens;
    for (int i = 1; i < argc; ++i) lens.push_back(std::atoi(argv[i]));
    if (lens.empty()) lens = {512, 2048, 8192};
    const double per_pos = (double)kSmolLm2.n_layer * kSmolLm2.n_head_kv * kSmolLm2.head_dim * 2;
    std::printf("| length | cache | budget MiB | bytes | bytes/token | stored bits/elem | vs fixed K4/V2 |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (int n : lens) {
      MPKV_CHECK(n >= 2, "bench_kv_bytes: lengths must be >= 2");
      mpkv::KvCacheOptions prog = kv("progressive", 4, 2), prog16 = kv("progressive", 4, 2, 16);
      prog.budget_mib = mpkv::run_budget_mib(prog, kSmolLm2, 1, n);
      prog16.budget_mib = mpkv::run_budget_mib(prog16, kSmolLm2, 1, n);
      // Pairs of (fixed K4/V2, others compared with it): pages of 64 tokens (the default), then 16.
      const struct { const char* name; mpkv::KvCacheOptions o; } rows[] = {
          {"uniform K4/V2", kv("uniform", 4, 2)}, {"uniform K3/V3", kv("uniform", 3, 3)}, {"progressive K4/V2", prog},
          {"uniform K4/V2, pages of 16", kv("uniform", 4, 2, 16)}, {"progressive K4/V2, pages of 16", prog16}};
      size_t fixed42 = 0;
      for (const auto& r : rows) {
        const size_t b = bytes_after(r.o, n);
        if (std::string(r.name).rfind("uniform K4/V2", 0) == 0) fixed42 = b;  // the reference of the rows after it
        const double held = n - 1;
        std::printf("| %d | %s | %.3f | %zu | %.0f | %.2f | %+.1f%% |\n", n, r.name, r.o.budget_mib, b, b / held,
                    b * 8.0 / (held * per_pos), fixed42 ? 100.0 * ((double)b / fixed42 - 1) : 0.0);
      }
      // One newest page per (layer, KV head, K|V) at 16 bits instead of 4 (keys) or 2 (values).
      const mpkv::KvPlan p = mpkv::make_kv_plan(prog, kSmolLm2);
      const double page = (double)p.page_tokens * kSmolLm2.head_dim / 8.0;
      const double open = kSmolLm2.n_layer * kSmolLm2.n_head_kv * page * ((16 - 4) + (16 - 2));
      std::printf("| %d | (newest pages at 16 bits: codes alone) | | %.0f | %.0f | %.2f | |\n", n, open, open / (n - 1),
                  open * 8.0 / ((n - 1) * per_pos));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

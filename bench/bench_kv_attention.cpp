// Decode attention over the paged KV cache (the fused kernels reading packed pages in place), in
// GB/s of KV bytes read per decode step, next to a memory-bandwidth probe measured in the same run
// with the same thread count (DESIGN.md 9). Also the time of progressive shrinks.
//
// One decode step = attend() of one query token (SmolLM2 shapes: 9 query heads, 3 KV heads,
// head_dim 64) over every layer of a synthetic context, like the forward pass does. Bytes read
// per step = packed page blocks + fp16 sink / window rows actually attended (not the unused
// buffer capacity, not metadata). Contexts are filled with random K/V (speed does not depend on
// content). --layers sets how many layers hold the context (default 8: 32K at f16 is 200 MB, far
// beyond the last-level cache; smaller contexts may partly fit in it, as in real decoding).
//
// Usage: bench_kv_attention [--ctx 1024,4096,8192,32768] [--layers 8] [--threads 1,2] [--reps 5]
//                           [--methods f16,uniform8,uniform4,uniform2,kivi4,kivi2,progressive2]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kvcache/kv_cache_factory.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace {

using namespace mpkv;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
  return v;
}

volatile float g_sink;

// Read bandwidth with `threads` threads: each sums its share of a 512 MiB buffer (8 accumulators).
double read_probe_gbs(int threads, int reps) {
  const size_t n = (512ull << 20) / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      float a[8] = {};
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 8)
        for (int k = 0; k < 8; ++k) a[k] += buf[i + k];
      for (float x : a) total += x;
    }
    g_sink = total;
    best = std::min(best, seconds_since(t0));
  }
  return (double)n * sizeof(float) / best / 1e9;
}

// "uniform4" -> method uniform, bits 4; "progressive2" -> progressive, final bits 2; "f16".
KvCacheOptions options_of(const std::string& name) {
  KvCacheOptions o;
  if (name == "f16") return o;
  size_t i = name.size();
  while (i > 0 && std::isdigit((unsigned char)name[i - 1])) --i;
  o.method = name.substr(0, i);
  if (i < name.size()) o.bits = std::stoi(name.substr(i));
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<int> contexts{1024, 4096, 8192, 32768}, threads{1, 2};
    std::vector<std::string> methods = split("f16,uniform8,uniform4,uniform2,kivi4,kivi2,progressive2");
    int layers = 8, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i], v = argv[i + 1];
      if (a == "--ctx") {
        contexts.clear();
        for (auto& x : split(v)) contexts.push_back(std::stoi(x));
      } else if (a == "--threads") {
        threads.clear();
        for (auto& x : split(v)) threads.push_back(std::stoi(x));
      } else if (a == "--methods") {
        methods = split(v);
      } else if (a == "--layers") {
        layers = std::stoi(v);
      } else if (a == "--reps") {
        reps = std::stoi(v);
      } else {
        throw Error("unknown option " + a);
      }
    }
    const KvDims dims{layers, 9, 3, 64};
    std::printf("bench_kv_attention: isa %s, %d layers x (9 q heads, 3 KV heads, head_dim 64), best of %d\n",
                isa_name(active_isa()), layers, reps);
    std::vector<double> probe;
    for (int t : threads) {
      probe.push_back(read_probe_gbs(t, 3));
      std::printf("memory read bandwidth probe, %d thread(s): %.2f GB/s\n", t, probe.back());
    }
    std::printf("\n%-14s %7s %4s %10s %10s %9s %8s\n", "method", "context", "thr", "KV MiB", "ms/step", "GB/s", "% probe");
    for (const std::string& m : methods) {
      for (int ctx : contexts) {
        KvCacheOptions o = options_of(m);
        auto cache = make_kv_cache(o, dims);
        // Fill: random K/V in chunks of 512 positions, every layer.
        const size_t row = (size_t)dims.n_head_kv * dims.head_dim;
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> k(512 * row), v(512 * row);
        for (int s = 0; s < ctx; s += 512) {
          const int n = std::min(512, ctx - s);
          for (int l = 0; l < layers; ++l) {
            for (size_t i = 0; i < n * row; ++i) k[i] = nd(rng) * (i % 37 == 5 ? 8.0f : 1.0f), v[i] = nd(rng);
            cache->append(0, l, n, k.data(), v.data());
          }
        }
        // KV bytes one step reads.
        const int tip = cache->tokens_in_pages(0, ctx);
        const int fp16_rows = ctx - tip;
        size_t page_bytes = 0;
        for (int l = 0; l < layers; ++l) {
          for (int p = 0; p < cache->n_pages(0, l); ++p) {
            for (int b = 0; b < 2 * dims.n_head_kv; ++b) {
              if (cache->plan().at(l, b / 2, b % 2 ? KvRole::value : KvRole::key).fp16) {
                page_bytes += (size_t)cache->plan().page_tokens * dims.head_dim * 2;
              } else {
                KvBlockLayout L;
                cache->page_block(0, l, p, b, &L);
                page_bytes += L.bytes;
              }
            }
          }
        }
        const size_t bytes = page_bytes + (size_t)layers * fp16_rows * row * 2 * 2;
        std::vector<float> q((size_t)dims.n_head * dims.head_dim), out(q.size());
        for (float& x : q) x = nd(rng);
        for (size_t ti = 0; ti < threads.size(); ++ti) {
          omp_set_num_threads(threads[ti]);
          double best = 1e30;
          for (int r = 0; r < reps; ++r) {
            const auto t0 = Clock::now();
            for (int l = 0; l < layers; ++l) cache->attend(0, l, 1, q.data(), out.data());
            best = std::min(best, seconds_since(t0));
          }
          const double gbs = bytes / best / 1e9;
          std::printf("%-14s %7d %4d %10.1f %10.3f %9.2f %7.0f%%\n", m.c_str(), ctx, threads[ti], bytes / 1048576.0,
                      1e3 * best, gbs, 100.0 * gbs / probe[ti]);
        }
      }
    }
    // Shrink pauses: a progressive 2-bit cache at 8K context under a budget that forces the
    // pool down the ladder while it fills (SmolLM2's 30 layers).
    {
      const KvDims full{30, 9, 3, 64};
      KvCacheOptions o = options_of("progressive2");
      auto probe_cache = make_kv_cache(o, full);
      o.budget_mib = probe_cache->sequence_bytes_bound(8192) / 1048576.0 * 1.05;
      auto cache = make_kv_cache(o, full);
      std::vector<double> pauses;
      cache->set_shrink_listener([&](const ShrinkPause& p) { pauses.push_back(p.seconds); });
      const size_t row = (size_t)full.n_head_kv * full.head_dim;
      std::vector<float> k(row), v(row);
      std::mt19937 rng(3);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      double max_at_8k = 0;
      for (int t = 0; t < 8192; ++t) {
        MPKV_CHECK(cache->reserve(0, 1), "shrink bench: budget too small");
        for (int l = 0; l < full.n_layer; ++l) {
          for (size_t i = 0; i < row; ++i) k[i] = nd(rng), v[i] = nd(rng);
          cache->append(0, l, 1, k.data(), v.data());
        }
      }
      for (double p : pauses) max_at_8k = std::max(max_at_8k, p);
      const ShrinkTotals& st = cache->shrink_totals();
      std::printf("\nshrink (progressive 2-bit, 30 layers, token-by-token to 8192 under a %.1f MiB budget):\n"
                  "  %zu pauses, %zu page shrinks, %.1f ms total, mean pause %.3f ms, longest %.3f ms (limit 20 ms)\n",
                  o.budget_mib, st.pauses, st.page_shrinks, 1e3 * st.seconds,
                  st.pauses ? 1e3 * st.seconds / st.pauses : 0.0, 1e3 * max_at_8k);
      const auto hist = cache->bits_histogram();
      std::printf("  blocks by bits at 8192:");
      for (auto it = hist.rbegin(); it != hist.rend(); ++it) std::printf(" %d-bit %zu", it->first, it->second);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

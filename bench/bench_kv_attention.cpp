// Decode attention over the paged KV cache (the fused kernels reading packed pages in place), in
// GB/s of KV bytes read per decode step, next to a memory-bandwidth probe measured in the same run
// with the same thread count (docs/design.md §9). Also the time of progressive shrinks.
//
// One decode step = attend() of one query token (SmolLM2 shapes: 9 query heads, 3 KV heads,
// head_dim 64) over every layer of a synthetic context, like the forward pass does. Bytes read
// per step = packed page blocks + fp16 sink / window rows actually attended (not the unused
// buffer capacity, not metadata). Contexts are filled with random K/V (speed does not depend on
// content). --layers sets how many layers hold the context (default 8: 32K at f16 is 200 MB, far
// beyond the last-level cache; smaller contexts may partly fit in it, as in real decoding).
//
// Side by side: per context, every method's cache is built first, then each repetition times one
// step of every method in turn (so a busy neighbour slows all methods alike), and the table shows
// medians, with each method's time as a ratio of f16's (when f16 is among the methods) and its
// read rate against the probe (read_bandwidth_gbs of matvec/machine_limits.h, the probe `mpkv bench`
// uses: median of 5 passes over 256 MiB right before the context's runs), and its multiply-adds
// against one core's int8 peak times the threads (int8_peak_probes, probed once): the roofline
// columns of docs/results/speed.md section 10. Wall time and process CPU time are both shown (on a
// shared machine the second is the steadier one).
//
// Usage: bench_kv_attention [--ctx 1024,4096,8192,32768] [--layers 8] [--threads 1,2] [--reps 9]
//                           [--methods f16,uniform16,uniform8,uniform4,uniform2,kivi4,kivi2,progressive2]
//                           (a method may end in gN: kivi2g64 = KIVI 2-bit with key groups of 64 tokens)
//                           [--shrink 1|0]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kvcache/kv_cache_factory.h"
#include "matvec/machine_limits.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace {

using namespace mpkv;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU time of the process (all its threads), seconds: with one thread the time it was on a core,
// which a busy machine inflates less than wall time (descheduled time is not counted).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "uniform4" -> method uniform, bits 4; "progressive2" -> progressive, final bits 2; "f16";
// "kivi2g64" -> KIVI at 2 bits with key groups of 64 tokens (--kv-group 64).
KvCacheOptions options_of(const std::string& name) {
  KvCacheOptions o;
  if (name == "f16") return o;
  std::string base = name;
  if (const size_t g = name.find('g', 1); g != std::string::npos && g + 1 < name.size() && std::isdigit((unsigned char)name[g + 1]) &&
                                         std::isdigit((unsigned char)name[g - 1])) {
    o.group = std::stoi(name.substr(g + 1));
    base = name.substr(0, g);
  }
  size_t i = base.size();
  while (i > 0 && std::isdigit((unsigned char)base[i - 1])) --i;
  o.method = mpkv::parse_kv_method(base.substr(0, i));
  if (i < base.size()) o.bits = std::stoi(base.substr(i));
  return o;
}

}  // namespace

// A cache of `ctx` random tokens in every layer, and the KV bytes one decode step reads from it.
struct FilledCache {
  std::string method;
  std::unique_ptr<PagedKvCache> cache;
  size_t bytes = 0;
};

FilledCache fill_cache(const std::string& m, const KvDims& dims, int ctx) {
  FilledCache f{m, make_kv_cache(options_of(m), dims), 0};
  PagedKvCache& cache = *f.cache;
  const int layers = dims.n_layer;
  // Fill: random K/V in chunks of 512 positions, every layer.
  const size_t row = (size_t)dims.n_head_kv * dims.head_dim;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(512 * row), v(512 * row);
  for (int s = 0; s < ctx; s += 512) {
    const int n = std::min(512, ctx - s);
    for (int l = 0; l < layers; ++l) {
      for (size_t i = 0; i < n * row; ++i) k[i] = nd(rng) * (i % 37 == 5 ? 8.0f : 1.0f), v[i] = nd(rng);
      cache.append(0, l, n, k.data(), v.data());
    }
  }
  const int fp16_rows = ctx - cache.byte_model().tokens_in_pages(0, ctx);
  size_t page_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    for (int p = 0; p < cache.n_pages(0, l); ++p) {
      for (int b = 0; b < 2 * dims.n_head_kv; ++b) {
        if (cache.plan().at(l, b / 2, b % 2 ? KvRole::value : KvRole::key).fp16) {
          page_bytes += (size_t)cache.plan().page_tokens * dims.head_dim * 2;
        } else {
          KvBlockLayout L;
          cache.page_block(0, l, p, b, &L);
          page_bytes += L.bytes;
        }
      }
    }
  }
  f.bytes = page_bytes + (size_t)layers * fp16_rows * row * 2 * 2;
  return f;
}

int main(int argc, char** argv) {
  try {
    std::vector<int> contexts{1024, 4096, 8192, 32768}, threads{1, 2};
    std::vector<std::string> methods = split("f16,uniform16,uniform8,uniform4,uniform2,kivi4,kivi2,progressive2");
    int layers = 8, reps = 9;
    bool shrink = true;
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
      } else if (a == "--shrink") {
        shrink = v != "0";
      } else {
        throw Error("unknown option " + a);
      }
    }
    const KvDims dims{layers, 9, 3, 64};
    std::printf("bench_kv_attention: isa %s, %d layers x (9 q heads, 3 KV heads, head_dim 64), median of %d\n",
                isa_name(active_isa()), layers, reps);
    // The int8 multiply-add peak of one core (the best loop int8_peak_probes() finds), times the threads.
    const std::vector<Int8PeakProbe> peaks = int8_peak_probes();
    const double core_peak = peaks.empty() ? 0.0 : peaks.front().macs_per_s;
    std::printf("int8 peak: %s %.1f GMAC/s per core\n", peaks.empty() ? "none" : peaks.front().name, core_peak / 1e9);
    std::printf("\n%-14s %7s %4s %8s %9s %7s %9s %7s %7s %8s %7s\n", "method", "context", "thr", "KV MiB", "wall ms",
                "x f16", "cpu ms", "x f16", "GB/s", "% probe", "% int8");
    for (int ctx : contexts) {
      std::vector<FilledCache> caches;
      for (const std::string& m : methods) caches.push_back(fill_cache(m, dims, ctx));
      std::vector<float> q((size_t)dims.n_head * dims.head_dim), out(q.size());
      std::mt19937 rng(11);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& x : q) x = nd(rng);
      for (int t : threads) {
        const double probe = read_bandwidth_gbs(t);
        omp_set_num_threads(t);
        std::vector<std::vector<double>> wall(caches.size()), cpu(caches.size());
        for (int r = 0; r < reps; ++r) {
          for (size_t mi = 0; mi < caches.size(); ++mi) {
            const auto t0 = Clock::now();
            const double c0 = cpu_seconds();
            for (int l = 0; l < layers; ++l) caches[mi].cache->attend(0, l, 1, q.data(), out.data());
            cpu[mi].push_back(cpu_seconds() - c0);
            wall[mi].push_back(seconds_since(t0));
          }
        }
        double f16_wall = 0, f16_cpu = 0;
        for (size_t mi = 0; mi < caches.size(); ++mi)
          if (caches[mi].method == "f16") f16_wall = median(wall[mi]), f16_cpu = median(cpu[mi]);
        for (size_t mi = 0; mi < caches.size(); ++mi) {
          const double w = median(wall[mi]), c = median(cpu[mi]), gbs = caches[mi].bytes / w / 1e9;
          char rw[16] = "-", rc[16] = "-";
          if (f16_wall > 0) std::snprintf(rw, sizeof rw, "%.2f", w / f16_wall);
          if (f16_cpu > 0) std::snprintf(rc, sizeof rc, "%.2f", c / f16_cpu);
          // Multiply-adds of the step: every query head's scores and weighted values over every row
          // (ctx x layers x n_head x head_dim x 2), against the int8 peak (the packed pages' q8 kernels
          // do them in int8; f16's are fp32 FMAs, shown against the same peak for scale).
          const double macs = (double)ctx * layers * dims.n_head * dims.head_dim * 2;
          char ri[16] = "-";
          if (core_peak > 0) std::snprintf(ri, sizeof ri, "%.0f%%", 100.0 * macs / w / (core_peak * t));
          std::printf("%-14s %7d %4d %8.1f %9.3f %7s %9.3f %7s %7.2f %7.0f%% %7s\n", caches[mi].method.c_str(), ctx, t,
                      caches[mi].bytes / 1048576.0, 1e3 * w, rw, 1e3 * c, rc, gbs, 100.0 * gbs / probe, ri);
        }
        std::printf("%-14s %7d %4d %8s %9s %7s %9s %7s %7.2f %7s\n", "(read probe)", ctx, t, "", "", "", "", "", probe, "100%");
      }
    }
    if (!shrink) return 0;
    // Shrink pauses: a progressive 2-bit cache at 8K context under a budget that forces the
    // pool down the ladder while it fills (SmolLM2's 30 layers).
    {
      const KvDims full{30, 9, 3, 64};
      KvCacheOptions o = options_of("progressive2");
      auto probe_cache = make_kv_cache(o, full);
      o.budget_mib = probe_cache->byte_model().sequence_bytes_bound(8192) / 1048576.0 * 1.05;
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

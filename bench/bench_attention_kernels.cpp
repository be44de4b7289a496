// The int8 paged-attention kernels alone (paged_attention_kernels.h: packed_scores_q8,
// packed_accumulate_q8), ns per row of one KV head, for every kernel table this CPU runs but _ref.
// SmolLM2's decode shape: 3 queries per KV head, head_dim 64, one call per 64-row page; 512 pages
// (2-bit keys: ~640 KiB) so the codes come from L2, not DRAM: this times the kernels' arithmetic,
// which bench_kv_attention's whole decode step (planning, softmax, memory) dilutes. Each figure is
// the minimum over --reps passes (a busy neighbour only adds time).
//
// Usage: bench_attention_kernels [--reps 15]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "attention/paged_attention.h"
#include "attention/paged_attention_kernels.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_kernels.h"
#include "util/error.h"

namespace {

using namespace mpkv;
using Clock = std::chrono::steady_clock;

constexpr int kDim = 64, kRows = 64, kQueries = 3, kPages = 512;

// Minimum over `reps` passes of f() (one pass = one call per page), in ns per row.
template <class F>
double ns_per_row(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int p = 0; p < kPages; ++p) f(p);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 1e9 * best / ((double)kPages * kRows);
}

std::vector<float> pseudo_gaussian(size_t n, uint32_t seed) {  // sum of 4 uniforms: speed does not depend on content
  std::vector<float> v(n);
  for (float& x : v) {
    float s = 0;
    for (int k = 0; k < 4; ++k) seed = seed * 1664525u + 1013904223u, s += (float)(seed >> 8) / 16777216.0f;
    x = s - 2.0f;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int reps = 15;
    for (int i = 1; i + 1 < argc; i += 2) {
      if (std::string(argv[i]) != "--reps") throw Error(std::string("unknown option ") + argv[i]);
      reps = std::stoi(argv[i + 1]);
    }
    std::printf("bench_attention_kernels: %d queries, head_dim %d, %d pages of %d rows, min of %d passes, ns per row\n",
                kQueries, kDim, kPages, kRows, reps);
    std::printf("%-12s %-6s %5s %8s %8s\n", "kernels", "keys", "bits", "scores", "values");
    const auto q = pseudo_gaussian((size_t)kQueries * kDim, 11);
    std::vector<int8_t> q8_bytes;
    std::vector<float> q8_params;
    const Q8Queries q8 = quantize_queries_q8(q.data(), kDim, kQueries, kDim, q8_bytes, q8_params);
    auto w = pseudo_gaussian((size_t)kQueries * kMaxKernelRows, 13);
    for (float& x : w) x = std::abs(x);  // softmax weights
    std::vector<float> s((size_t)kQueries * kMaxKernelRows), acc((size_t)kQueries * kDim);
    for (const PagedAttentionKernels* K : paged_attention_kernel_tables()) {
      if (K->isa == Isa::scalar) continue;
      // Key groups: uniform per token; KIVI at the cache's default of 32 tokens and at 64 (--kv-group 64:
      // one group per 64-row page, so one query fold per call instead of two).
      const std::pair<QuantMethod, int> key_kinds[] = {{QuantMethod::uniform, 0}, {QuantMethod::kivi, 32}, {QuantMethod::kivi, 64}};
      for (auto [method, group] : key_kinds) {
        for (int bits : {2, 4}) {
          QuantOptions o;
          o.method = method;
          o.role = KvRole::key;
          o.bits = bits;
          o.head_dim = kDim;
          o.group = group;
          const KvQuantizer qz(o, quant_kernels_for(Isa::scalar));
          const KvBlockLayout L = qz.block_layout(kRows);
          std::vector<uint8_t> pages((size_t)L.bytes * kPages);
          for (int p = 0; p < kPages; ++p) {
            const auto x = pseudo_gaussian((size_t)kRows * kDim, 100 + p);
            quant_kernels_for(Isa::scalar).quantize(L, x.data(), kDim, 0, kRows, pages.data() + (size_t)p * L.bytes);
          }
          auto view = [&](int p) { return PackedBlockView{&L, pages.data() + (size_t)p * L.bytes, nullptr}; };
          const double ts = ns_per_row(reps, [&](int p) { K->packed_scores_q8(view(p), q8, 0, kRows, s.data(), kMaxKernelRows); });
          std::string tv = "-";  // values are always per-token (KIVI's too): timed with the uniform keys' pages
          if (method == QuantMethod::uniform && q8_values_apply(L)) {
            const double t = ns_per_row(reps, [&](int p) {
              K->packed_accumulate_q8(view(p), w.data(), kMaxKernelRows, kQueries, 0, kRows, acc.data(), kDim);
            });
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.2f", t);
            tv = buf;
          }
          const std::string keys = method == QuantMethod::kivi ? "kivi" + std::to_string(group) : "token";
          std::printf("%-12s %-6s %5d %8.2f %8s\n", K->name, keys.c_str(), bits, ts, tv.c_str());
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_kernels: %s\n", e.what());
    return 1;
  }
}

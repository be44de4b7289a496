// Throughput of the KV quantizer kernels (quantize, dequantize, shrink) for each ISA variant, in
// GB/s of memory traffic, next to a memory-bandwidth probe measured in the same run (docs/design.md §9).
//
// Traffic counted per kernel: quantize reads fp32 rows and writes blocks; dequantize reads blocks
// and writes fp32 rows; shrink reads 2b-bit blocks and writes b-bit blocks. One thread (the
// kernels are per-call single-threaded; the cache runs heads in parallel), so compare with the
// single-thread probe. Working set: --mib MiB of fp32 input (default 64) in pages of 256 tokens.
//
// Usage: bench_quant [--mib N] [--reps R] [--head-dim D]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/kv_block_layout.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_kernels.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

volatile float g_sink;  // keeps the probe's reads alive

// Single-thread read bandwidth (sum of floats, 8 independent accumulators) and copy bandwidth
// (memcpy, read + write bytes) over `bytes` bytes.
void bandwidth_probe(size_t bytes, int reps, double& read_gbs, double& copy_gbs) {
  std::vector<float> a(bytes / 4, 1.0f), b(bytes / 4, 0.0f);
  const double tr = best_seconds(reps, [&] {
    float s[8] = {};
    for (size_t i = 0; i + 8 <= a.size(); i += 8)
      for (int k = 0; k < 8; ++k) s[k] += a[i + k];
    g_sink = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
  });
  const double tc = best_seconds(reps, [&] { std::memcpy(b.data(), a.data(), bytes); });
  g_sink = b[b.size() / 2];
  read_gbs = (double)bytes / tr / 1e9;
  copy_gbs = 2.0 * (double)bytes / tc / 1e9;
}

int arg_int(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mpkv;
  try {
    const int mib = std::max(1, arg_int(argc, argv, "--mib", 64));
    const int reps = std::max(1, arg_int(argc, argv, "--reps", 3));
    const int d = arg_int(argc, argv, "--head-dim", 128);
    const int P = 256;  // tokens per page
    const int pages = std::max(1, (int)(((size_t)mib << 20) / sizeof(float) / ((size_t)P * d)));
    const size_t n_tok = (size_t)pages * P;

    double read_gbs = 0, copy_gbs = 0;
    bandwidth_probe((size_t)mib << 20, reps, read_gbs, copy_gbs);
    std::printf("bench_quant: head_dim %d, %d pages x %d tokens (%.0f MiB fp32), best of %d, 1 thread\n", d, pages, P,
                (double)n_tok * d * 4 / (1 << 20), reps);
    std::printf("memory bandwidth probe: read %.2f GB/s, memcpy %.2f GB/s (read + write)\n\n", read_gbs, copy_gbs);
    std::printf("%-7s %-5s %-11s %10s %10s %10s\n", "isa", "bits", "kernel", "GB/s", "Gcode/s", "of memcpy");

    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(n_tok * d), y(n_tok * d);
    for (float& v : x) v = nd(rng);

    std::vector<Isa> isas{Isa::scalar};
    if ((int)best_isa() >= (int)Isa::avx2) isas.push_back(Isa::avx2);
    if ((int)best_isa() >= (int)Isa::avx512) isas.push_back(Isa::avx512);

    auto row = [&](Isa isa, int bits, const char* what, double bytes, double secs) {
      std::printf("%-7s %-5d %-11s %10.2f %10.3f %9.0f%%\n", isa_name(isa), bits, what, bytes / secs / 1e9,
                  (double)n_tok * d / secs / 1e9, 100.0 * bytes / secs / 1e9 / copy_gbs);
    };
    for (Isa isa : isas) {
      const QuantKernels& k = quant_kernels_for(isa);
      for (int bits : {16, 8, 4, 3, 2, 1}) {
        const KvBlockLayout L = make_kv_block_layout(Codec::uniform, GroupAxis::token, bits, d, P, d);
        std::vector<uint8_t> blocks(L.bytes * pages);
        const double tq = best_seconds(reps, [&] {
          for (int p = 0; p < pages; ++p) k.quantize(L, &x[(size_t)p * P * d], d, 0, P, &blocks[L.bytes * p]);
        });
        row(isa, bits, "quantize", (double)(x.size() * 4 + blocks.size()), tq);
        const double td = best_seconds(reps, [&] {
          for (int p = 0; p < pages; ++p) k.dequantize(L, &blocks[L.bytes * p], 0, P, &y[(size_t)p * P * d], d);
        });
        row(isa, bits, "dequantize", (double)(y.size() * 4 + blocks.size()), td);
        if (bits == 16 || bits == 8 || bits == 4 || bits == 2) {
          const KvBlockLayout H = halved_layout(L);
          std::vector<uint8_t> half(H.bytes * pages);
          const double ts = best_seconds(reps, [&] {
            for (int p = 0; p < pages; ++p) k.shrink(L, &blocks[L.bytes * p], H, &half[H.bytes * p]);
          });
          char name[32];
          std::snprintf(name, sizeof name, "shrink>%d", bits / 2);
          row(isa, bits, name, (double)(blocks.size() + half.size()), ts);
        }
      }
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

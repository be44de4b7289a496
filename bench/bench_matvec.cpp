// Matvec throughput on the SmolLM2-135M decode shapes, next to the memory bandwidth measured here.
//
// For each shape, each kernel variant this CPU can run, and 1 and 2 threads, prints the weight
// bytes streamed per matvec divided by its median time:
//   hot  - the same matrix again and again (it stays in cache: the kernels' compute bound);
//   cold - cycling through copies of the matrix totalling >= 256 MiB, so weights come from DRAM as
//          they do in a real decode step (the whole model is read once per token).
// The bandwidth probe is a read-sum over a 256 MiB buffer with 1 and 2 threads, also median.
// Last, the per-token matvec time of the whole model (30 layers + the Q8_0 output head, cold,
// active kernels) and the tokens/s it alone would allow.
//
// --batch: only the batch-width table. First the int8 multiply-add peak of one core, probed in
// the same run: a loop of independent multiply-adds (vpdpbusd on 512 and 256 bits where the CPU
// has AVX-512 VNNI, vpmaddubsw on 256 bits), in multiply-adds per second of thread CPU time; the
// best probe is "the peak". Then per shape and layout (GGUF rows, and the packed row-interleaved
// copy for types that have one, matvec_packed.h) the time per activation row of one matmul_rows
// call with n = 1, 4, 16, 32 rows (1 thread, active kernels, hot matrix), its multiply-adds per
// second (rows x cols x n / time) and their percentage of the peak. Timed in thread CPU time
// (CLOCK_THREAD_CPUTIME_ID), median of 15+ calls, so time the process spends descheduled on a
// shared machine does not count (cache sharing still does).
//
// --gemma: the --batch table for Gemma-3-270M's decode matrices (its Q4_K_M file: Q4_K, Q6_K,
// Q5_0, Q8_0; the packed layout beside the GGUF rows where the type has one) at n = 1, 8, 16.
//
// --kquant: only the K-quant table (Gemma-3-270M / SmolLM2 shapes whose columns are a multiple of
// 256, in Q4_K, Q5_K, Q6_K and, for comparison, Q5_0 / Q8_0): per matrix and n = 1, 8 activation
// rows, the thread CPU time of one matmul_rows call (1 thread, active kernels, hot, median of 15+),
// the weight bytes per call over it (GB/s) and the row dots (weight rows x n) per second.
//
// --model PATH: the matrices of a real GGUF model as one decode step reads them, 1 thread, cold
// (a step's weights exceed the caches): per role (the output head; each layer matrix summed over
// the layers) and for the whole step, the thread CPU time of matmul_rows with n = 1 at each weight
// prefetch distance (matvec_prefetch_bytes: 0 = none, then the default), the settings alternating
// within every repetition so a shared machine's load falls on all alike; median of 15.
//
// Usage: bench_matvec [--quick] [--batch] [--gemma] [--kquant] [--model PATH]
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*() (GCC bug
// 105593, as in matvec_avx512.cpp); the probes read no uninitialized value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"
#include "matvec/machine_limits.h"
#include "matvec/matvec.h"
#include "matvec/matvec_packed.h"
#include "model/model.h"
#include "util/cpu_features.h"
#include "util/fp16.h"

using namespace mpkv;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Random codes with sane fp16 scales (d ~ 0.01, m ~ -0.1) in every block of `type` (the K-quants'
// d / dmin too: Q4_K / Q5_K keep them at bytes 0 / 2, Q6_K its d at byte 208).
std::vector<uint8_t> random_matrix_bytes(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t row_bytes = ggml_row_bytes(type, cols);
  std::vector<uint8_t> bytes((size_t)rows * row_bytes);
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = (uint8_t)rng();
  const size_t bsize = ggml_type_info((uint32_t)type)->type_size;
  const uint16_t d = fp32_to_fp16(0.01f), m = fp32_to_fp16(-0.1f), dmin = fp32_to_fp16(0.01f);
  const size_t d_at = type == GgmlType::Q6_K ? 208 : 0;
  for (size_t off = 0; off < bytes.size(); off += bsize) {
    std::memcpy(&bytes[off + d_at], &d, 2);
    if (type == GgmlType::Q4_1 || type == GgmlType::Q5_1) std::memcpy(&bytes[off + 2], &m, 2);
    if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) std::memcpy(&bytes[off + 2], &dmin, 2);
  }
  return bytes;
}

struct Shape {
  const char* what;
  int64_t rows, cols;
  GgmlType type;
  int per_token;  // how many such matvecs one decode token runs
};

// SmolLM2-135M: d_model 576, 9 heads x 64, 3 KV heads x 64, ffn 1536, 30 layers, vocab 49152.
const Shape kShapes[] = {
    {"attn_q/attn_output", 576, 576, GgmlType::Q4_1, 2 * 30},
    {"attn_k/attn_v", 192, 576, GgmlType::Q4_1, 2 * 30},
    {"ffn_gate/ffn_up", 1536, 576, GgmlType::Q4_1, 2 * 30},
    {"ffn_down", 576, 1536, GgmlType::Q4_1, 30},
    {"output (tied token_embd)", 49152, 576, GgmlType::Q8_0, 1},
};

constexpr size_t kColdBytes = size_t(256) << 20;

struct Timing {
  double median, best;  // seconds per matvec
};

// Seconds per matvec (median and best of many runs); cold cycles through enough copies of the
// matrix to exceed kColdBytes. The best run shows what the kernel does when no other process
// takes the core (the build machine is shared; a descheduled OpenMP worker costs a whole
// scheduler tick, which the median then shows).
Timing time_matvec(const MatvecKernels& k, const Shape& s, int threads, bool cold, double min_seconds) {
  const size_t row_bytes = ggml_row_bytes(s.type, s.cols);
  const size_t mat_bytes = row_bytes * (size_t)s.rows;
  const size_t copies = cold ? std::max<size_t>(2, (kColdBytes + mat_bytes - 1) / mat_bytes) : 1;
  // One buffer holding `copies` matrices back to back.
  std::vector<uint8_t> all;
  all.reserve(copies * mat_bytes);
  const std::vector<uint8_t> one = random_matrix_bytes(s.type, s.rows, s.cols, 1);
  for (size_t c = 0; c < copies; ++c) all.insert(all.end(), one.begin(), one.end());
  std::vector<float> x(s.cols), y(s.rows);
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);

  omp_set_num_threads(threads);
  std::vector<double> times;
  size_t c = 0;
  const auto start = Clock::now();
  for (int warm = 0; warm < 3; ++warm) matmul_rows_with(k, {s.type, s.rows, s.cols, all.data(), row_bytes}, x.data(), y.data(), 1);
  while (times.size() < 15 || (seconds_since(start) < min_seconds && times.size() < 100000)) {
    const WeightMatrix w{s.type, s.rows, s.cols, all.data() + c * mat_bytes, row_bytes};
    c = (c + 1) % copies;
    const auto t0 = Clock::now();
    matmul_rows_with(k, w, x.data(), y.data(), 1);
    times.push_back(seconds_since(t0));
  }
  return {median(times), *std::min_element(times.begin(), times.end())};
}

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Median thread-CPU seconds of one matmul_rows call with n activation rows (1 thread, hot), on the
// GGUF rows or (packed) on their packed copy.
double cpu_seconds_per_call(const Shape& s, int n, bool packed = false) {
  const std::vector<uint8_t> m = random_matrix_bytes(s.type, s.rows, s.cols, 1);
  WeightMatrix w{s.type, s.rows, s.cols, m.data(), ggml_row_bytes(s.type, s.cols)};
  const std::unique_ptr<PackedMatrix> p = packed ? pack_weight_matrix(w) : nullptr;
  w.packed = p.get();
  std::vector<float> x((size_t)n * s.cols), y((size_t)n * s.rows);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);
  omp_set_num_threads(1);
  matmul_rows(w, x.data(), y.data(), n);  // warm
  std::vector<double> times;
  const double start = thread_cpu_seconds();
  while (times.size() < 15 || (thread_cpu_seconds() - start < 0.2 && times.size() < 10000)) {
    const double t0 = thread_cpu_seconds();
    matmul_rows(w, x.data(), y.data(), n);
    times.push_back(thread_cpu_seconds() - t0);
  }
  return median(times);
}

// Gemma-3-270M's decode matrices (d_model 640, 4 heads x 256 = 1024, 1 KV head, ffn 2048, vocab
// 262144; its Q4_K_M file's types: `mpkv info --tensors`); per_token = matrices of the shape per step.
const Shape kGemmaShapes[] = {
    {"gemma attn_output", 640, 1024, GgmlType::Q4_K, 18}, {"gemma ffn_down", 640, 2048, GgmlType::Q4_K, 9},
    {"gemma ffn_down", 640, 2048, GgmlType::Q6_K, 9},     {"gemma ffn_gate/ffn_up", 2048, 640, GgmlType::Q5_0, 36},
    {"gemma attn_q", 1024, 640, GgmlType::Q5_0, 18},      {"gemma attn_v", 256, 640, GgmlType::Q8_0, 18},
    {"gemma output (tied)", 262144, 640, GgmlType::Q8_0, 1},
};

template <size_t S, size_t W>
void print_batch_table(const Shape (&shapes)[S], const int (&widths)[W]) {
  omp_set_num_threads(1);
  const std::vector<Int8PeakProbe> probes = int8_peak_probes();
  std::printf("int8 multiply-add peak of one core (thread CPU time, median of 5):");
  for (const Int8PeakProbe& p : probes) std::printf("  %s %.1f GMAC/s", p.name, p.macs_per_s / 1e9);
  const double peak = probes.empty() ? 0.0 : probes[0].macs_per_s;
  std::printf("\n  peak = %.1f GMAC/s (%s)\n", peak / 1e9, probes.empty() ? "no SIMD probe" : probes[0].name);
  std::printf("matmul_rows with n rows, 1 thread, %s kernels, hot: us of thread CPU time per activation row, "
              "GMAC/s, %% of the peak\n",
              active_matvec_kernels().name);
  std::printf("%-26s %-10s %-5s %-6s", "matrix", "shape", "type", "layout");
  for (int n : widths) std::printf(" | %6s%-2d %7s %5s", "n=", n, "GMAC/s", "%peak");
  std::printf("\n");
  for (const Shape& s : shapes) {
    char shape[32];
    std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.rows, (long long)s.cols);
    for (bool packed : {false, true}) {
      if (packed && !has_packed_layout(s.type)) continue;
      std::printf("%-26s %-10s %-5s %-6s", s.what, shape, ggml_type_name((uint32_t)s.type).c_str(),
                  packed ? "packed" : "gguf");
      for (int n : widths) {
        const double t = cpu_seconds_per_call(s, n, packed);
        const double macs = (double)s.rows * (double)s.cols * n / t;
        std::printf(" | %8.1f %7.1f %4.0f%%", t / n * 1e6, macs / 1e9, peak > 0 ? 100.0 * macs / peak : 0.0);
      }
      std::printf("\n");
    }
  }
}

// Gemma-3-270M (d_model 640, 4 heads x 256, ffn 2048) and SmolLM2-135M matrices whose columns
// are a multiple of 256, the K-quants' super-block; per_token is unused here.
const Shape kKquantShapes[] = {
    {"gemma ffn_down", 640, 2048, GgmlType::Q4_K, 0}, {"gemma ffn_down", 640, 2048, GgmlType::Q5_K, 0},
    {"gemma ffn_down", 640, 2048, GgmlType::Q6_K, 0}, {"gemma ffn_down", 640, 2048, GgmlType::Q5_0, 0},
    {"gemma ffn_down", 640, 2048, GgmlType::Q8_0, 0}, {"gemma attn_output", 640, 1024, GgmlType::Q4_K, 0},
    {"gemma attn_output", 640, 1024, GgmlType::Q6_K, 0}, {"smollm2 ffn_down", 576, 1536, GgmlType::Q4_K, 0},
    {"smollm2 ffn_down", 576, 1536, GgmlType::Q5_K, 0}, {"smollm2 ffn_down", 576, 1536, GgmlType::Q6_K, 0},
};

void print_kquant_table() {
  std::printf("matmul_rows with n activation rows: thread CPU time per call, 1 thread, %s kernels, hot, median\n",
              active_matvec_kernels().name);
  std::printf("GB/s = weight bytes / time per call; Mrows/s = weight rows x n / time per call / 1e6\n");
  std::printf("%-18s %-9s %-5s %-8s | %9s %7s %8s | %9s %7s %8s | %s\n", "matrix", "shape", "type", "path", "n=1 us",
              "GB/s", "Mrows/s", "n=8 us", "GB/s", "Mrows/s", "n=1/n=8 per row");
  for (const Shape& s : kKquantShapes) {
    char shape[32];
    std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.rows, (long long)s.cols);
    const double bytes = (double)ggml_row_bytes(s.type, s.cols) * (double)s.rows;
    const double t1 = cpu_seconds_per_call(s, 1), t8 = cpu_seconds_per_call(s, 8);
    std::printf("%-18s %-9s %-5s %-8s | %9.1f %7.2f %8.2f | %9.1f %7.2f %8.2f | %.2fx\n", s.what, shape,
                ggml_type_name((uint32_t)s.type).c_str(), matvec_uses_dequant_fallback(s.type) ? "dequant" : "int-dot",
                t1 * 1e6, bytes / t1 / 1e9, (double)s.rows / t1 / 1e6, t8 * 1e6, bytes / t8 / 1e9,
                8.0 * (double)s.rows / t8 / 1e6, t1 / (t8 / 8.0));
  }
}

// One role of a real model's decode step: its matrices (one per layer, or the head alone).
struct Role {
  std::string name;
  std::vector<WeightMatrix> mats;
  double bytes() const {
    double b = 0;
    for (const WeightMatrix& w : mats) b += (double)w.rows * (double)w.row_bytes;
    return b;
  }
};

std::vector<Role> model_roles(const ModelWeights& mw) {
  std::vector<Role> roles = {{"attn_q", {}}, {"attn_k", {}},   {"attn_v", {}},   {"attn_output", {}},
                             {"ffn_gate", {}}, {"ffn_up", {}}, {"ffn_down", {}}};
  for (const LayerWeights& L : mw.layers) {
    const WeightMatrix* m[] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
    for (size_t i = 0; i < roles.size(); ++i) roles[i].mats.push_back(*m[i]);
  }
  roles.push_back({mw.tied_output ? "output (tied token_embd)" : "output", {mw.output}});
  return roles;
}

// The distinct GGUF types of a role, e.g. "Q4_K+Q6_K".
std::string role_types(const Role& r) {
  std::vector<std::string> t;
  for (const WeightMatrix& w : r.mats) {
    const std::string n = ggml_type_name((uint32_t)w.type);
    if (std::find(t.begin(), t.end(), n) == t.end()) t.push_back(n);
  }
  std::string out;
  for (const std::string& n : t) out += (out.empty() ? "" : "+") + n;
  return out;
}

void print_model_table(const std::string& path) {
  const auto model = Model::load(path);
  const std::vector<Role> roles = model_roles(model->weights());
  const int distances[] = {0, matvec_prefetch_bytes()};
  constexpr int kReps = 15;
  omp_set_num_threads(1);
  int64_t max_rows = 0, max_cols = 0;
  for (const Role& r : roles)
    for (const WeightMatrix& w : r.mats) max_rows = std::max(max_rows, w.rows), max_cols = std::max(max_cols, w.cols);
  std::vector<float> x(max_cols), y(max_rows);
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);
  // t[d][role][rep]: thread CPU seconds of the role's matrices in one step (layer order, as a step).
  std::vector<std::vector<std::vector<double>>> t(2, std::vector<std::vector<double>>(roles.size()));
  std::vector<std::vector<double>> step(2);
  for (int rep = 0; rep < kReps; ++rep) {
    for (int d = 0; d < 2; ++d) {
      set_matvec_prefetch_bytes(distances[d]);
      std::vector<double> per(roles.size(), 0.0);
      for (size_t l = 0; l < roles[0].mats.size(); ++l) {  // layer by layer, then the head
        for (size_t r = 0; r + 1 < roles.size(); ++r) {
          const double t0 = thread_cpu_seconds();
          matmul_rows(roles[r].mats[l], x.data(), y.data(), 1);
          per[r] += thread_cpu_seconds() - t0;
        }
      }
      const double t0 = thread_cpu_seconds();
      matmul_rows(roles.back().mats[0], x.data(), y.data(), 1);
      per.back() = thread_cpu_seconds() - t0;
      double total = 0;
      for (size_t r = 0; r < roles.size(); ++r) {
        if (rep > 0) t[d][r].push_back(per[r]);  // the first repetition faults the mapping in
        total += per[r];
      }
      if (rep > 0) step[d].push_back(total);
    }
  }
  set_matvec_prefetch_bytes(distances[1]);
  std::printf("%s: matmul_rows, n = 1, 1 thread, %s kernels, cold; thread CPU time per decode step, median of %d\n",
              path.c_str(), active_matvec_kernels().name, kReps - 1);
  std::printf("%-26s %-10s %8s | %10s %7s | %10s %7s | %s\n", "role", "types", "MiB", "no prefetch", "GB/s",
              ("prefetch " + std::to_string(distances[1])).c_str(), "GB/s", "time ratio");
  auto row = [&](const std::string& name, const std::string& types, double bytes, const std::vector<double>& a,
                 const std::vector<double>& b) {
    const double ma = median(a), mb = median(b);
    std::printf("%-26s %-10s %8.2f | %8.0f us %7.2f | %8.0f us %7.2f | %.2fx\n", name.c_str(), types.c_str(),
                bytes / 1048576.0, ma * 1e6, bytes / ma / 1e9, mb * 1e6, bytes / mb / 1e9, mb / ma);
  };
  double all = 0;
  for (size_t r = 0; r < roles.size(); ++r) {
    row(roles[r].name, role_types(roles[r]), roles[r].bytes(), t[0][r], t[1][r]);
    all += roles[r].bytes();
  }
  row("whole step", "", all, step[0], step[1]);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, batch_only = false, kquant_only = false, gemma_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--model" && i + 1 < argc) {
      print_model_table(argv[i + 1]);
      return 0;
    }
    quick = quick || std::string(argv[i]) == "--quick";
    batch_only = batch_only || std::string(argv[i]) == "--batch";
    kquant_only = kquant_only || std::string(argv[i]) == "--kquant";
    gemma_only = gemma_only || std::string(argv[i]) == "--gemma";
  }
  if (kquant_only) {
    print_kquant_table();
    return 0;
  }
  if (batch_only) {
    print_batch_table(kShapes, {1, 4, 16, 32});
    return 0;
  }
  if (gemma_only) {
    print_batch_table(kGemmaShapes, {1, 8, 16});
    return 0;
  }
  const double min_seconds = quick ? 0.05 : 0.3;
  const int saved_threads = omp_get_max_threads();

  std::printf("mpkv bench_matvec  (best ISA %s, active %s, %d hardware threads)\n\n", isa_name(best_isa()),
              isa_name(active_isa()), omp_get_num_procs());

  const size_t probe_bytes = size_t(256) << 20;
  const double bw1 = read_bandwidth_gbs(1, probe_bytes, quick ? 5 : 11), bw2 = read_bandwidth_gbs(2, probe_bytes, quick ? 5 : 11);
  std::printf("memory bandwidth (read-sum over 256 MiB): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n\n", bw1, bw2);

  std::vector<const MatvecKernels*> variants = {&matvec_kernels_ref()};
  if ((int)best_isa() >= (int)Isa::avx2) variants.push_back(&matvec_kernels_avx2());
  if ((int)best_isa() >= (int)Isa::avx512) variants.push_back(&matvec_kernels_avx512());

  std::printf("GB/s = weight bytes / time per matvec; median of many runs (best run in brackets)\n");
  std::printf("%-26s %-10s %-5s %-7s %3s %9s %18s %9s %18s\n", "matrix", "shape", "type", "kernel", "thr",
              "hot us", "hot GB/s", "cold us", "cold GB/s");
  for (const Shape& s : kShapes) {
    const double bytes = (double)ggml_row_bytes(s.type, s.cols) * (double)s.rows;
    char shape[32];
    std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.rows, (long long)s.cols);
    for (const MatvecKernels* k : variants) {
      for (int threads : {1, 2}) {
        const Timing hot = time_matvec(*k, s, threads, false, min_seconds);
        const Timing cold = time_matvec(*k, s, threads, true, min_seconds);
        std::printf("%-26s %-10s %-5s %-7s %3d %9.1f %8.2f (%7.2f) %9.1f %8.2f (%7.2f)\n", s.what, shape,
                    ggml_type_name((uint32_t)s.type).c_str(), k->name, threads, hot.median * 1e6,
                    bytes / hot.median / 1e9, bytes / hot.best / 1e9, cold.median * 1e6, bytes / cold.median / 1e9,
                    bytes / cold.best / 1e9);
      }
    }
  }

  // Whole-model matvec cost of one decode token with the active kernels, cold.
  std::printf("\nper-token matvec time, SmolLM2-135M shapes, %s kernels, cold:\n", active_matvec_kernels().name);
  for (int threads : {1, 2}) {
    double total = 0, best = 0, bytes = 0;
    for (const Shape& s : kShapes) {
      const Timing t = time_matvec(active_matvec_kernels(), s, threads, true, min_seconds);
      total += s.per_token * t.median;
      best += s.per_token * t.best;
      bytes += s.per_token * (double)ggml_row_bytes(s.type, s.cols) * (double)s.rows;
    }
    std::printf("  %d thread(s): %.2f ms/token median, %.2f best (%.1f MB of weights, %.1f GB/s median)"
                " -> at most %.0f tokens/s from matvecs\n",
                threads, total * 1e3, best * 1e3, bytes / 1e6, bytes / total / 1e9, 1.0 / total);
  }
  omp_set_num_threads(saved_threads);
  return 0;
}

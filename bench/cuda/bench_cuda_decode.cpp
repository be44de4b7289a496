// CUDA microbenchmark (docs/cuda.md, "Device run"): decode attention time over packed
// pages of each width against context and batch, in % of the device copy bandwidth measured in
// the same run; in-place shrink throughput; and attention throughput of one byte budget filled
// with fp16 pages vs 2-bit pages. Prints markdown tables (medians of timed runs).
//
// Usage: bench_cuda_decode [--quick]   (--quick: a few configurations, for a smoke run)
// Timing: CUDA events around the split and merge kernels of one decode step, after a write of
// 256 MiB that evicts the L2 cache; medians of 9 runs after 2 warm-up runs. Bytes read = the
// pages' bytes (codes, scales, zeros or fp16 rows) + the fp16 sink/window rows.
// Model shape: 8 KV heads, 32 query heads (GQA group 4), head_dim 128, 64-token pages, sink 1 and
// window 128 fp16 rows per sequence (mpkv's defaults); data is random (timing does not depend on it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/device/device_buffer.h"
#include "cuda/device/device_page_store.h"
#include "cuda/page_format.h"
#include "cuda/page_table.h"
#include "util/fp16.h"

namespace mpkv::cuda {
namespace {

constexpr int kHeadsKv = 8, kHeads = 32, kHeadDim = 128, kPage = 64, kF16Rows = 129;
constexpr int kWarmup = 2, kTimed = 9;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device copy bandwidth (bytes read + written per second) of a 1 GiB device-to-device cudaMemcpy.
double copy_bandwidth() {
  const size_t n = 1ull << 30;
  DeviceBuffer a(n), b(n);
  cuda_check(cudaMemset(a.get(), 1, n), "memset");
  EventTimer t;
  std::vector<double> ms;
  for (int i = 0; i < kWarmup + kTimed; ++i) {
    t.start();
    cuda_check(cudaMemcpy(b.get(), a.get(), n, cudaMemcpyDeviceToDevice), "copy");
    const double x = t.stop_ms();
    if (i >= kWarmup) ms.push_back(x);
  }
  return 2.0 * n / (median(ms) * 1e-3);
}

// A page format and the widths its template pages sit at.
struct Width {
  std::string name;
  PageFormat f;
  std::vector<int> halvings;  // template pages: each shrunk this many times, cycled over a sequence's pages
};

std::vector<Width> widths() {
  std::vector<Width> w;
  const ComponentSpec f16{true, GroupAxis::token, 0, 16, 16};
  w.push_back({"f16", make_page_format(kHeadsKv, kHeadDim, kPage, {f16, f16}), {0}});
  for (int bits : {16, 8, 4, 2}) {
    const ComponentSpec u{false, GroupAxis::token, kHeadDim, bits, bits};
    w.push_back({"uniform" + std::to_string(bits), make_page_format(kHeadsKv, kHeadDim, kPage, {u, u}), {0}});
  }
  for (int bits : {4, 2}) {
    const ComponentSpec k{false, GroupAxis::channel, 32, bits, bits}, v{false, GroupAxis::token, kHeadDim, bits, bits};
    w.push_back({"kivi" + std::to_string(bits), make_page_format(kHeadsKv, kHeadDim, kPage, {k, v}), {0}});
  }
  const ComponentSpec prog{false, GroupAxis::token, kHeadDim, 16, 2};
  w.push_back({"mixed 2+4 (progressive)", make_page_format(kHeadsKv, kHeadDim, kPage, {prog, prog}), {3, 2}});
  return w;
}

// Overwrites a buffer larger than the L2 cache (H200: 50 MB) before each timed run, so small
// configurations are read from HBM as large ones are, not from a warm L2.
void flush_l2() {
  static DeviceBuffer junk(256ull << 20);
  cuda_check(cudaMemset(junk.get(), 0, junk.bytes()), "L2 flush");
}

struct Timing {
  double ms = 0, bytes = 0;
  int items = 0;
};

// Decode attention of `batch` sequences of `context` tokens each.
Timing time_decode(const Width& w, int batch, int context, int target_items) {
  const int pages = (context - kF16Rows) / kPage, f16_rows = context - pages * kPage;
  std::vector<HostPage> templates;
  const std::vector<uint16_t> k = random_half_rows((size_t)kPage * kHeadsKv * kHeadDim, 1),
                              v = random_half_rows((size_t)kPage * kHeadsKv * kHeadDim, 2);
  double page_bytes = 0;
  for (int h : w.halvings) {
    HostPage p = write_host_page(w.f, k.data(), v.data(), kPage);
    for (int s = 0; s < h; ++s) {
      std::vector<uint8_t> to = p.bits;
      for (auto& b : to) b = (uint8_t)std::max(2, b / 2);
      shrink_host_page(w.f, p, to);
    }
    templates.push_back(std::move(p));
  }
  const size_t f16_bytes = (size_t)f16_rows * kHeadsKv * kHeadDim * 2;
  size_t per_seq = 2 * (f16_bytes + kArenaAlign);
  for (int i = 0; i < pages; ++i) per_seq += templates[i % templates.size()].bytes.size() + kArenaAlign;
  const size_t arena = per_seq * batch + templates.size() * (templates[0].bytes.size() + kArenaAlign) + (1 << 20);
  DevicePageStore store(w.f, arena);
  std::vector<int> tslots;
  for (const HostPage& p : templates) tslots.push_back(store.upload_page(p));
  const std::vector<uint16_t> rows = random_half_rows((size_t)f16_rows * kHeadsKv * kHeadDim, 3);
  std::vector<SequenceView> seqs(batch);
  for (SequenceView& s : seqs) {
    for (int i = 0; i < pages; ++i) {
      const int t = i % (int)tslots.size();
      s.page_slots.push_back(store.clone_page(tslots[t]));
      page_bytes += (double)templates[t].bytes.size();
    }
    s.last_page_len = kPage;
    s.f16_rows = f16_rows;
    s.f16_k = store.upload_rows(rows.data(), f16_rows);
    s.f16_v = store.upload_rows(rows.data(), f16_rows);
  }
  const BatchTable t = build_batch_table(seqs, kPage, target_items);
  DecodeStep step(store, t, kHeads);
  std::vector<float> q((size_t)batch * kHeads * kHeadDim, 0.01f);
  step.set_queries(q);
  EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < kWarmup + kTimed; ++i) {
    flush_l2();
    timer.start();
    step.run();
    const double x = timer.stop_ms();
    if (i >= kWarmup) ms.push_back(x);
  }
  step.output();  // reports any kernel error
  Timing r;
  r.ms = median(ms);
  r.bytes = page_bytes + 2.0 * f16_bytes * batch;
  r.items = step.n_work();
  return r;
}

void decode_table(const char* title, const std::vector<Width>& ws, const std::vector<std::pair<int, int>>& shapes,
                  double copy_bw, int target_items) {
  std::printf("\n### %s\n\n| width | batch | context | work items | time (us) | bytes read (MiB) | GB/s | %% of copy BW |\n"
              "|---|---|---|---|---|---|---|---|\n", title);
  for (const Width& w : ws) {
    for (auto [batch, context] : shapes) {
      const Timing t = time_decode(w, batch, context, target_items);
      const double bw = t.bytes / (t.ms * 1e-3);
      std::printf("| %s | %d | %d | %d | %.1f | %.1f | %.1f | %.1f |\n", w.name.c_str(), batch, context, t.items,
                  t.ms * 1e3, t.bytes / (1 << 20), bw / 1e9, 100.0 * bw / copy_bw);
      std::fflush(stdout);
    }
  }
}

void shrink_table(int n_pages) {
  const ComponentSpec prog{false, GroupAxis::token, kHeadDim, 16, 1};
  const PageFormat f = make_page_format(kHeadsKv, kHeadDim, kPage, {prog, prog});
  const std::vector<uint16_t> k = random_half_rows((size_t)kPage * kHeadsKv * kHeadDim, 4),
                              v = random_half_rows((size_t)kPage * kHeadsKv * kHeadDim, 5);
  const HostPage p = write_host_page(f, k.data(), v.data(), kPage);
  DevicePageStore store(f, (uint64_t)n_pages * (p.bytes.size() + kArenaAlign) + (1 << 20));
  std::vector<int> slots{store.upload_page(p)};
  for (int i = 1; i < n_pages; ++i) slots.push_back(store.clone_page(slots[0]));
  std::printf("\n### In-place shrink, %d pages (8 KV heads x K,V of 64 tokens x 128 channels)\n\n"
              "| halving | source MiB | time (ms) | source GB/s | source + destination GB/s |\n|---|---|---|---|---|\n",
              n_pages);
  EventTimer timer;
  for (int from = 16; from > 1; from /= 2) {
    std::vector<std::vector<uint8_t>> to(slots.size(), std::vector<uint8_t>(f.n_blocks(), (uint8_t)(from / 2)));
    DevicePageStore::PreparedShrink s = store.prepare_shrink(slots, to);
    timer.start();
    store.run_shrink(s);
    const double ms = timer.stop_ms();
    const double src = (double)s.src_bytes, dst = src * (double)f.page_bytes(to[0].data()) /
                                                      (double)f.page_bytes(store.slot_bits(slots[0]).data());
    store.commit_shrink(s);
    std::printf("| %d -> %d | %.1f | %.3f | %.1f | %.1f |\n", from, from / 2, src / (1 << 20), ms, src / (ms * 1e-3) / 1e9,
                (src + dst) / (ms * 1e-3) / 1e9);
    std::fflush(stdout);
  }
}

// One byte budget filled with sequences of one context: fp16 pages vs 2-bit pages (uniform, the
// end of a progressive ladder). Throughput = tokens attended per second.
void budget_table(double budget_bytes, int context, int target_items) {
  std::printf("\n### One budget of %.1f GiB at %d-token context: fp16 vs 2-bit pages\n\n"
              "| pages | sequences | time (ms) | tokens attended / s | vs f16 |\n|---|---|---|---|---|\n",
              budget_bytes / (1 << 30), context);
  double f16_rate = 0;
  const ComponentSpec f16{true, GroupAxis::token, 0, 16, 16}, u2{false, GroupAxis::token, kHeadDim, 2, 2};
  const Width ws[] = {{"f16", make_page_format(kHeadsKv, kHeadDim, kPage, {f16, f16}), {0}},
                      {"uniform2", make_page_format(kHeadsKv, kHeadDim, kPage, {u2, u2}), {0}}};
  for (const Width& w : ws) {
    const int pages = (context - kF16Rows) / kPage, f16_rows = context - pages * kPage;
    std::vector<uint8_t> bits(w.f.n_blocks(), w.f.blocks[0].spec.init_bits);
    const double seq_bytes = (double)pages * w.f.page_bytes(bits.data()) + 2.0 * f16_rows * kHeadsKv * kHeadDim * 2;
    const int batch = std::max(1, (int)(budget_bytes / seq_bytes));
    const Timing t = time_decode(w, batch, context, target_items);
    const double rate = (double)batch * context / (t.ms * 1e-3);
    if (w.name == "f16") f16_rate = rate;
    std::printf("| %s | %d | %.3f | %.3g | %.2fx |\n", w.name.c_str(), batch, t.ms, rate, rate / f16_rate);
    std::fflush(stdout);
  }
}

int run(bool quick) {
  std::string why;
  if (!device_available(&why)) {
    std::fprintf(stderr, "bench_cuda_decode: no CUDA device (%s)\n", why.c_str());
    return 2;
  }
  std::printf("## CUDA decode attention microbenchmark\n\ndevice: %s\n", device_description().c_str());
  const int target_items = 2 * device_sm_count();
  const double copy_bw = copy_bandwidth();
  std::printf("copy bandwidth (device-to-device cudaMemcpy of 1 GiB, read + write, median of %d): %.1f GB/s\n"
              "work items target: %d per KV head (2 x SMs)\n", kTimed, copy_bw / 1e9, target_items);
  const std::vector<Width> ws = widths();
  if (quick) {
    decode_table("Quick: context", {ws[0], ws[4]}, {{1, 4096}, {4, 32768}}, copy_bw, target_items);
    shrink_table(256);
    return 0;
  }
  // The short sections first, so a run cut short by its timeout still has them.
  shrink_table(16384);
  budget_table(16.0 * (1 << 30), 32768, target_items);
  std::vector<std::pair<int, int>> ctx;
  for (int batch : {1, 16})
    for (int c : {1024, 4096, 16384, 32768, 65536, 131072}) ctx.push_back({batch, c});
  decode_table("Decode attention vs context (batch 1 and 16)", ws, ctx, copy_bw, target_items);
  std::vector<std::pair<int, int>> bat;
  for (int c : {4096, 32768})
    for (int batch : {1, 4, 16, 64, 256}) bat.push_back({batch, c});
  decode_table("Decode attention vs batch (4K and 32K context)", ws, bat, copy_bw, target_items);
  return 0;
}

}  // namespace
}  // namespace mpkv::cuda

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  try {
    return mpkv::cuda::run(quick);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_decode: %s\n", e.what());
    return 1;
  }
}

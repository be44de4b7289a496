#include "bench_roofline.h"

#include <algorithm>
#include <cstdio>

#include "matvec/machine_limits.h"

namespace mpkv::cli {

namespace {

double matrix_bytes(const WeightMatrix& w) { return (double)w.rows * (double)w.row_bytes; }
double matrix_macs(const WeightMatrix& w) { return (double)w.rows * (double)w.cols; }

template <class F>
double sum_matrices(const ModelWeights& mw, F f) {
  double s = f(mw.output);
  for (const LayerWeights& l : mw.layers)
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) s += f(*m);
  return s;
}

struct Fractions {
  double gbs, bw_frac, gmacs, mac_frac;
};

Fractions fractions(const StepWork& w, double step_seconds, const MachineLimits& m) {
  Fractions f{};
  f.gbs = (w.weight_bytes + w.kv_bytes) / step_seconds / 1e9;
  f.bw_frac = m.read_gbs > 0 ? f.gbs / m.read_gbs : 0.0;
  f.gmacs = w.macs / step_seconds / 1e9;
  f.mac_frac = m.int8_peak_macs > 0 ? f.gmacs * 1e9 / m.int8_peak_macs : 0.0;
  return f;
}

const char* binding_limit(const Fractions& f) {
  return f.bw_frac >= f.mac_frac ? "read bandwidth" : "int8 multiply-add peak";
}

}  // namespace

MachineLimits probe_machine_limits(int threads) {
  MachineLimits m;
  m.threads = threads;
  m.read_gbs = read_bandwidth_gbs(threads);
  const auto probes = int8_peak_probes();
  if (!probes.empty()) {
    m.int8_peak_macs = probes[0].macs_per_s * threads;
    m.peak_probe = probes[0].name;
  }
  return m;
}

std::string describe(const MachineLimits& m) {
  char b[200];
  std::snprintf(b, sizeof b, "read probe %.1f GB/s with %d thread%s; int8 peak %.1f GMAC/s (%d x %s)", m.read_gbs,
                m.threads, m.threads == 1 ? "" : "s", m.int8_peak_macs / 1e9, m.threads,
                m.peak_probe.empty() ? "no SIMD probe" : m.peak_probe.c_str());
  return b;
}

StepWork decode_step_work(const Model& model, const PagedKvCache& cache, int sequences, int calls, int depth) {
  StepWork w;
  const ModelWeights& mw = model.weights();
  w.weight_bytes = calls * sum_matrices(mw, matrix_bytes);
  w.macs = sequences * sum_matrices(mw, matrix_macs);
  for (int s = 0; s < sequences; ++s)
    for (const auto& [bits, bytes] : cache.read_bytes_by_bits(s)) w.kv_bytes_by_bits[bits] += bytes;
  for (const auto& [bits, bytes] : w.kv_bytes_by_bits) w.kv_bytes += (double)bytes;
  // Attention per token and layer: every query head scores its visible rows and sums their values.
  const KvDims& d = cache.dims();
  for (int l = 0; l < d.n_layer; ++l) {
    const int window = d.window_of(l);
    const int rows = window > 0 ? std::min(window, depth + 1) : depth + 1;
    w.macs += (double)sequences * d.n_head * rows * d.head_dim * 2.0;
  }
  return w;
}

std::string roofline_header() {
  return "  depth  seqs   step ms   MiB read   weights        KV  KV by width              GB/s  %read   GMAC/s  %int8  binds";
}

std::string roofline_row(int depth, int sequences, const StepWork& w, double step_seconds, const MachineLimits& m) {
  const Fractions f = fractions(w, step_seconds, m);
  std::string kv;
  for (auto it = w.kv_bytes_by_bits.rbegin(); it != w.kv_bytes_by_bits.rend(); ++it) {
    char b[48];
    std::snprintf(b, sizeof b, "%s%d:%.2f", kv.empty() ? "" : " ", it->first, it->second / 1048576.0);
    kv += b;
  }
  char b[400];
  std::snprintf(b, sizeof b, "  %5d  %4d  %8.2f  %9.2f  %8.2f  %8.2f  %-22s  %5.1f  %4.0f%%  %7.1f  %4.0f%%  %s", depth,
                sequences, step_seconds * 1e3, (w.weight_bytes + w.kv_bytes) / 1048576.0, w.weight_bytes / 1048576.0,
                w.kv_bytes / 1048576.0, kv.empty() ? "-" : kv.c_str(), f.gbs, 100.0 * f.bw_frac, f.gmacs,
                100.0 * f.mac_frac, binding_limit(f));
  return b;
}

nlohmann::json roofline_json(const StepWork& w, double step_seconds, const MachineLimits& m) {
  const Fractions f = fractions(w, step_seconds, m);
  nlohmann::json by_bits = nlohmann::json::object();
  for (const auto& [bits, bytes] : w.kv_bytes_by_bits) by_bits[std::to_string(bits)] = bytes;
  return {{"step_seconds", step_seconds},  {"weight_bytes", w.weight_bytes}, {"kv_bytes", w.kv_bytes},
          {"kv_bytes_by_bits", by_bits},   {"gb_s", f.gbs},                  {"read_probe_fraction", f.bw_frac},
          {"gmac_s", f.gmacs},             {"int8_peak_fraction", f.mac_frac}, {"binds", binding_limit(f)}};
}

}  // namespace mpkv::cli

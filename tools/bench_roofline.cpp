#include "bench_roofline.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "matvec/machine_limits.h"

namespace mpkv::cli {

namespace {

struct Fractions {
  double gbs, bw_frac, gmacs, mac_frac;
};

Fractions fractions(const StepWork& w, double step_seconds, const MachineLimits& m) {
  Fractions f{};
  f.gbs = (double)(w.weight_bytes + w.kv_bytes()) / step_seconds / 1e9;
  f.bw_frac = m.read_gbs > 0 ? f.gbs / m.read_gbs : 0.0;
  f.gmacs = (double)w.macs / step_seconds / 1e9;
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
  std::vector<DecodeToken> tokens;
  for (int s = 0; s < sequences; ++s) tokens.push_back({s, depth});
  StepWork w = decode_call_work(weight_work(model), cache, tokens);
  w.weight_bytes *= (uint64_t)calls;
  return w;
}

std::string roofline_header() {
  return "  depth  seqs   step ms   MiB read   weights        KV  KV by width              GB/s  %read   GMAC/s  %int8  binds";
}

std::string roofline_row(int depth, int sequences, const StepWork& w, double step_seconds, const MachineLimits& m) {
  const Fractions f = fractions(w, step_seconds, m);
  std::string kv;
  const std::map<int, uint64_t> by_bits = w.kv_bytes_by_bits_with_rows();
  for (auto it = by_bits.rbegin(); it != by_bits.rend(); ++it) {
    char b[48];
    std::snprintf(b, sizeof b, "%s%d:%.2f", kv.empty() ? "" : " ", it->first, (double)it->second / 1048576.0);
    kv += b;
  }
  char b[400];
  std::snprintf(b, sizeof b, "  %5d  %4d  %8.2f  %9.2f  %8.2f  %8.2f  %-22s  %5.1f  %4.0f%%  %7.1f  %4.0f%%  %s", depth,
                sequences, step_seconds * 1e3, (double)(w.weight_bytes + w.kv_bytes()) / 1048576.0,
                (double)w.weight_bytes / 1048576.0, (double)w.kv_bytes() / 1048576.0, kv.empty() ? "-" : kv.c_str(),
                f.gbs, 100.0 * f.bw_frac, f.gmacs, 100.0 * f.mac_frac, binding_limit(f));
  return b;
}

nlohmann::json roofline_json(const StepWork& w, double step_seconds, const MachineLimits& m) {
  const Fractions f = fractions(w, step_seconds, m);
  nlohmann::json by_bits = nlohmann::json::object();
  for (const auto& [bits, bytes] : w.kv_bytes_by_bits_with_rows()) by_bits[std::to_string(bits)] = bytes;
  return {{"step_seconds", step_seconds},  {"weight_bytes", w.weight_bytes}, {"kv_bytes", w.kv_bytes()},
          {"kv_bytes_by_bits", by_bits},   {"gb_s", f.gbs},                  {"read_probe_fraction", f.bw_frac},
          {"gmac_s", f.gmacs},             {"int8_peak_fraction", f.mac_frac}, {"binds", binding_limit(f)}};
}

}  // namespace mpkv::cli

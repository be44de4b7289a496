// /metrics: Prometheus text exposition (format 0.0.4) of the engine's gauges and totals
// (EngineMetrics) and of per-request latency histograms observed from the engine's output events
// (docs/serving.md, "Metrics"). Names follow vLLM's, with its model_name label, so routers and
// dashboards made for vLLM read them; mpkv's own KV figures use the mpkv: prefix.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"

namespace mpkv::server {

// A cumulative histogram with fixed upper bounds (the +Inf bucket is implicit). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending
  void observe(double x);
  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf (= count)
    double sum = 0.0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, bounds_.size() + 1
  double sum_ = 0.0;
};

// What the serving layer remembers about one request between its output events.
struct RequestTiming {
  std::chrono::steady_clock::time_point last_tokens{};
  bool has_tokens = false;
};

// The machine's limits the decode-step counters are divided by (docs/serving.md "Roofline
// counters"): probed once at startup by `mpkv serve --probe-machine-limits` (matvec/machine_limits.h);
// all zero when not probed.
struct MachineLimitGauges {
  double read_bytes_per_s = 0.0;  // read-sum bandwidth with the server's threads
  double int8_macs_per_s = 0.0;   // one core's best int8 multiply-add probe x threads
  int threads = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // The probed limits /metrics shows from now on (any thread).
  void set_machine_limits(const MachineLimitGauges& g);

  // Called with every output event of a request (engine thread): each token after the first adds
  // an inter-token latency (the gap since the previous event, split evenly over its tokens); the
  // final event counts the finish reason and, unless the request was aborted, adds (from
  // RequestStats) TTFT, end-to-end latency, queue time, prefill time (first scheduled to first
  // token), decode time (first token to the end), inference time (first scheduled to the end)
  // and the prompt and generated token counts.
  void on_output(RequestTiming& timing, const RequestOutput& out,
                 std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

  // Counts one request's unknown top-level field (mpkv:request_unknown_fields_total{field=...}).
  // The first kMaxUnknownFieldLabels distinct names get their own label value; later new names are
  // counted under field="other". Returns true the first time a name is seen (the caller logs it
  // once); a name beyond the label limit is remembered too, so it is also logged only once.
  bool count_unknown_field(const std::string& name);
  static constexpr size_t kMaxUnknownFieldLabels = 64;

  // The whole exposition. `engine` is a snapshot of the engine (all zeros while loading).
  std::string render(const EngineMetrics& engine) const;

 private:
  std::string model_label_;  // model_name="..." (escaped)
  Histogram ttft_, itl_, e2e_, queue_, prefill_, decode_, inference_;
  Histogram prompt_tokens_, generation_tokens_;  // tokens per request
  mutable std::mutex mu_;
  std::array<uint64_t, 4> finished_{};  // by FinishReason stop, length (length + context), abort
  std::map<std::string, uint64_t> unknown_fields_;  // at most kMaxUnknownFieldLabels names
  uint64_t unknown_other_ = 0;
  std::set<std::string> unknown_seen_;  // names logged (bounded at 4096: beyond, logging may repeat)
  MachineLimitGauges limits_;           // guarded by mu_
};

// A Prometheus label value with \, " and newline escaped.
std::string escape_label_value(const std::string& v);

}  // namespace mpkv::server

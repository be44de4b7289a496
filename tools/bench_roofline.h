// The roofline of a decode step for `mpkv bench` (docs/results/speed.md "Roofline"): the bytes a
// step reads (weights, KV by width) against the read bandwidth probed in the same run, and the
// int8 multiply-adds it does against the probed peak, so each decode figure says how far it is
// from the machine's limit and which limit binds.
#pragma once
#include <cstddef>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/step_work.h"
#include "kvcache/paged_kv_cache.h"
#include "model/model.h"

namespace mpkv::cli {

struct MachineLimits {
  int threads = 1;
  double read_gbs = 0.0;         // read-sum bandwidth with `threads` threads (matvec/machine_limits.h)
  double int8_peak_macs = 0.0;   // one core's best int8 probe x threads (0: no SIMD probe)
  std::string peak_probe;        // which instruction gave it
};
MachineLimits probe_machine_limits(int threads);
std::string describe(const MachineLimits& m);

// What one decode step (`sequences` tokens in `calls` forward calls, each sequence at `depth`
// positions) reads and multiplies (engine/step_work.h, the count the serving engine's decode-step
// counters use too): the weights once per call, each sequence's KV reads and multiply-adds.
StepWork decode_step_work(const Model& model, const PagedKvCache& cache, int sequences, int calls, int depth);

// One row of the roofline table under roofline_header(): depth, sequences, step time, MiB read
// (weights, KV and KV by width), GB/s and its share of the read probe, GMAC/s and its share of
// the int8 peak, and which limit binds (the larger share); and its JSON form.
std::string roofline_header();
std::string roofline_row(int depth, int sequences, const StepWork& w, double step_seconds, const MachineLimits& m);
nlohmann::json roofline_json(const StepWork& w, double step_seconds, const MachineLimits& m);

}  // namespace mpkv::cli

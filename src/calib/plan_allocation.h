// From calibration inputs to a KV plan: the allocation stage of `mpkv calibrate`
// (docs/calibration.md). One byte model: every byte count here is the KV cache's own accounting
// (KvByteModel::overhead_bytes_bound + block_bytes_bound for one sequence of max_len tokens, from
// the same block layouts the cache allocates), so a plan solved for budget B runs max_len tokens in
// a cache of budget B.
//
// Methods:
//   pmkvq      PM-KVQ: per block (a layer's K and V heads, or with per_head one KV head's K and V)
//              a final width on the shift ladder {2, 4, 8}, by the integer program on the summed
//              first-order Taylor sensitivities under the budget; a progressive plan (pages start at
//              16 bits) whose components carry their sensitivity at 16, 8, 4, 2 bits as shrink costs.
//   ratequant  RateQuant: water-filling + exact knapsack over {2, 3, 4, 8} ({1..4} for turbo) per
//              (layer, KV head, K|V); the budget becomes the average bits whose plan has B bytes.
//   combined   RateQuant finals on the ladder {2, 4, 8}, reached progressively from 16 bits; shrink
//              costs w * D(b).
//   fixed      a baseline with the calibration's smoothing: every component at the average bits as
//              `--kv-method <quantizer>` would store it (b + 0.5: keys b + 1, values b), or at an
//              explicit K/V split (k_bits, v_bits: e.g. K4/V2 at 3 bits, the uniform splits RateQuant
//              is compared with); with `progressive`, finals on the ladder (3: K4/V2). For the
//              ablations and baselines (docs/calibration.md).
// Key smoothing scales from the calibration travel in every plan. Ablation switches: `direct`
// writes a progressive method's finals as a fixed-width plan (quantized directly, no shift);
// `force_beta` replaces every component's fitted beta (RateQuant with a wrong distortion slope).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "calib/calibration_inputs.h"
#include "kvcache/kv_plan.h"

namespace mpkv::calib {

enum class PlanMethod { pmkvq, ratequant, combined, fixed };
PlanMethod parse_plan_method(const std::string& s);  // Error naming the choices
const char* plan_method_name(PlanMethod m);  // the names of kvcache/kv_method.h
KvPlanMethod kv_plan_method(PlanMethod m);

struct PlanRequest {
  PlanMethod method = PlanMethod::pmkvq;
  bool per_head = false;  // pmkvq only
  QuantMethod quantizer = QuantMethod::uniform;
  KvDims dims;
  KvModelIdentity model;
  int64_t max_len = 4096;  // tokens of the one sequence the budget is solved for
  int window = kDefaultKvWindow, sink = kDefaultKvSink;
  std::vector<int> layer_windows;  // per-layer fp16 windows (KvPlan::layer_windows; empty: window everywhere)
  int64_t budget_bytes = 0;  // > 0: the budget; 0: the bytes of every component at avg_bits
  double avg_bits = 0;
  bool progressive = false;  // fixed only: pages start at 16 bits and shrink to the finals
  int k_bits = 0, v_bits = 0;  // fixed only: an explicit K/V split (both or neither; avg_bits unused)
  bool direct = false;       // pmkvq / combined: the same finals, not progressive
  double force_beta = 0;     // ratequant / combined: > 1 replaces every fitted beta (ablation)
};

// The average bits whose uniform plan has the request's budget (bytes are linear in bits); the
// request's avg_bits when no byte budget is given.
double budget_avg_bits(const PlanRequest& r, int64_t budget);

// Widths the method chooses from: pmkvq and combined the ladder {2, 4, 8}; ratequant {2, 3, 4, 8}
// for min-max codes, {1, 2, 3, 4} for turbo.
std::vector<int> plan_candidate_bits(PlanMethod m, QuantMethod q);
// Error unless the request can be solved: a min-max quantizer for the progressive methods,
// per_head only with pmkvq, avg_bits within the candidate widths (when no budget), a K/V split only
// for fixed (both widths ones the quantizer has), max_len in [1, 2^24], window and sink >= 0,
// layer_windows empty or one window >= 0 per layer.
void validate(const PlanRequest& r);
// The request's plan with every component at `bits` (progressive for pmkvq and combined), page
// size and defaults as `--kv-method <quantizer>` would build them.
KvPlan request_plan(const PlanRequest& r, int bits);
// KvByteModel::sequence_bytes_bound(max_len) of a plan.
int64_t plan_bytes(const KvPlan& plan, int64_t max_len);
// Bytes of request_plan at `bits` for max_len tokens; fractional bits interpolate linearly (exact:
// codes are linear in bits, everything else does not depend on them).
double uniform_plan_bytes(const PlanRequest& r, double bits);
// The budget: budget_bytes, or uniform_plan_bytes(avg_bits) rounded down. Error when it cannot hold
// every component at the lowest candidate width (the message names the smallest feasible budget).
int64_t resolve_budget(const PlanRequest& r);

struct PlanAllocation {
  KvPlan plan;          // validated; solve.budget_bytes = the budget, solve.bytes = plan_bytes(plan)
  std::string summary;  // one or two lines for the user
};

// Error on inputs that do not match the request's dims, an infeasible budget, or a method whose
// inputs are missing (pmkvq needs sensitivities at 2, 4 and 8 bits).
PlanAllocation allocate_plan(const CalibrationInputs& in, const PlanRequest& r);

}  // namespace mpkv::calib

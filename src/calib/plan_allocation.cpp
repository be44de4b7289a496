#include "calib/plan_allocation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "alloc/pmkvq_allocator.h"
#include "alloc/progressive_schedule.h"
#include "alloc/ratequant_allocator.h"
#include "kvcache/kv_cache_factory.h"
#include "kvcache/kv_byte_model.h"
#include "util/error.h"
#include "util/units.h"

namespace mpkv::calib {

namespace {

bool is_progressive(const PlanRequest& r) {
  return r.method == PlanMethod::fixed ? r.progressive : r.method != PlanMethod::ratequant;
}

// s(16) is not measured: the first-order error scales with the step S = range / (2^b - 1), so it
// is taken as s(8) * (2^8 - 1) / (2^16 - 1) (docs/calibration.md).
double sensitivity_at_16(double s8) { return s8 * 255.0 / 65535.0; }

// The average bits the budget is taken at: an explicit K/V split's mean, else avg_bits.
double request_bits(const PlanRequest& r) { return r.k_bits > 0 ? (r.k_bits + r.v_bits) / 2.0 : r.avg_bits; }

// Index of `bits` in in.bits; Error when the calibration did not measure it.
size_t bit_index(const CalibrationInputs& in, int bits) {
  const auto it = std::find(in.bits.begin(), in.bits.end(), bits);
  MPKV_CHECK(it != in.bits.end(), "calibration has no PM-KVQ sensitivity at " + std::to_string(bits) +
                                      " bits (recalibrate: pmkvq needs 2, 4 and 8)");
  return (size_t)(it - in.bits.begin());
}

// The PM-KVQ blocks: per layer (every KV head, K and V) or per (layer, KV head).
struct PmkvqBlocks {
  int n_layer, n_head_kv;
  bool per_head;
  size_t count() const { return per_head ? (size_t)n_layer * n_head_kv : (size_t)n_layer; }
  size_t of(int layer, int head) const { return per_head ? (size_t)layer * n_head_kv + head : (size_t)layer; }
};

// The integer program: sensitivities summed per block, bytes per block from the cache's accounting.
PmkvqProblem pmkvq_problem(const CalibrationInputs& in, const PlanRequest& r, const PmkvqBlocks& blocks,
                           int64_t budget) {
  PmkvqProblem p;
  p.bits = plan_candidate_bits(PlanMethod::pmkvq, r.quantizer);
  p.sensitivity.assign(blocks.count(), std::vector<double>(p.bits.size(), 0.0));
  p.bytes.assign(blocks.count(), std::vector<int64_t>(p.bits.size(), 0));
  int64_t overhead = 0;
  for (size_t j = 0; j < p.bits.size(); ++j) {
    const size_t bi = bit_index(in, p.bits[j]);
    const KvByteModel bytes(r.dims, request_plan(r, p.bits[j]));
    overhead = (int64_t)bytes.overhead_bytes_bound((int)r.max_len);
    for (int l = 0; l < r.dims.n_layer; ++l)
      for (int h = 0; h < r.dims.n_head_kv; ++h) {
        const size_t i = blocks.of(l, h);
        p.sensitivity[i][j] += in.pmkvq_k[l][h][bi] + in.pmkvq_v[l][h][bi];
        for (int kv = 0; kv < 2; ++kv) p.bytes[i][j] += (int64_t)bytes.block_bytes_bound(l, h * 2 + kv, (int)r.max_len);
      }
  }
  p.budget_bytes = budget - overhead;  // the overhead does not depend on bits
  return p;
}

void allocate_pmkvq(const CalibrationInputs& in, const PlanRequest& r, int64_t budget, PlanAllocation& out) {
  const PmkvqBlocks blocks{r.dims.n_layer, r.dims.n_head_kv, r.per_head};
  const PmkvqProblem p = pmkvq_problem(in, r, blocks, budget);
  const PmkvqAllocation a = pmkvq_allocate(p);
  for (int l = 0; l < r.dims.n_layer; ++l)
    for (int h = 0; h < r.dims.n_head_kv; ++h)
      for (KvRole role : {KvRole::key, KvRole::value}) {
        KvComponentPlan& c = out.plan.at(l, h, role);
        c.bits = a.bits[blocks.of(l, h)];
        const auto& s = role == KvRole::key ? in.pmkvq_k[l][h] : in.pmkvq_v[l][h];
        for (int b : {2, 4, 8}) c.sensitivity[b] = s[bit_index(in, b)];
        c.sensitivity[16] = sensitivity_at_16(c.sensitivity[8]);
      }
  out.plan.solve.method = KvPlanMethod::pmkvq;
  out.plan.solve.per_head = r.per_head;
  out.plan.solve.objective = a.objective;
  out.summary = std::string("pmkvq (") + (r.per_head ? "per head" : "per layer") + ", ladder {2, 4, 8}): objective " +
                "sum s(b) = " + std::to_string(a.objective);
}

// Each component's bytes per bit for max_len tokens (block_bytes_bound at 4 bits minus at 2, halved:
// code bytes are linear in bits), divided by their gcd: all 1 unless some layers slide (a windowed
// layer holds fewer pages, so its bits cost fewer bytes). [kv_component_index order]
std::vector<int> bit_costs(const PlanRequest& r) {
  const KvByteModel c2(r.dims, request_plan(r, 2)), c4(r.dims, request_plan(r, 4));
  std::vector<int64_t> d((size_t)r.dims.n_layer * r.dims.n_head_kv * 2);
  int64_t g = 0;
  for (int l = 0; l < r.dims.n_layer; ++l)
    for (int h = 0; h < r.dims.n_head_kv; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        const int block = h * 2 + kv;
        int64_t& x = d[kv_component_index(l, h, kv, r.dims.n_head_kv)];
        x = (int64_t)c4.block_bytes_bound(l, block, (int)r.max_len) - (int64_t)c2.block_bytes_bound(l, block, (int)r.max_len);
        g = std::gcd(g, x);
      }
  std::vector<int> cost(d.size(), 1);
  if (g > 0)
    for (size_t i = 0; i < d.size(); ++i) cost[i] = (int)std::max<int64_t>(1, d[i] / g);
  return cost;
}

RateQuantProblem ratequant_problem(const CalibrationInputs& in, const PlanRequest& r, int64_t budget) {
  const std::vector<int> cb = plan_candidate_bits(PlanMethod::ratequant, r.quantizer);
  RateQuantProblem p;
  p.min_bits = cb.front();
  p.max_bits = cb.back();
  p.min_max_quantizer = r.quantizer != QuantMethod::turbo;
  p.avg_bits = std::clamp(budget_avg_bits(r, budget), (double)cb.front(), (double)cb.back());
  const std::vector<int> cost = bit_costs(r);
  double wmin = INFINITY;
  for (const auto* t : {&in.w_k, &in.w_v})
    for (const auto& l : *t)
      for (double w : l)
        if (w > 0) wmin = std::min(wmin, w);
  MPKV_CHECK(std::isfinite(wmin), "calibration: every RateQuant weight is zero (no gradient signal)");
  for (int l = 0; l < r.dims.n_layer; ++l)
    for (int h = 0; h < r.dims.n_head_kv; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        RateComponent rc;
        const double w = kv == 0 ? in.w_k[l][h] : in.w_v[l][h];
        rc.weight = w > 0 ? w : wmin * 1e-6;  // a dead head still needs a positive weight
        // The component's own fit when the calibration has one, else the pooled fit of its role.
        const ExponentialFit& f = !in.fits.empty() ? (kv == 0 ? in.fits.key : in.fits.value)[l][h]
                                                   : (kv == 0 ? in.fit_k : in.fit_v);
        rc.model = {f.alpha, r.force_beta > 0 ? r.force_beta : f.beta};
        rc.cost = cost[kv_component_index(l, h, kv, r.dims.n_head_kv)];
        p.components.push_back(rc);
      }
  return p;
}

// RateQuant's Theorem 3 per role: the predicted gain AM/GM of alpha_i w_i (exact for one beta,
// continuous bits, no bound) next to the achieved J_uniform / J_mixed over that role's components,
// J_uniform at the role's own average bits (so the gain is the redistribution within the role, what
// the theorem predicts, not the bits moved between K and V).
std::string role_gains(const RateQuantProblem& p, const std::vector<int>& bits) {
  std::string out;
  for (int kv = 0; kv < 2; ++kv) {
    RateQuantProblem aw;  // weights alpha_i w_i, for am_gm_ratio
    aw.avg_bits = p.avg_bits;
    aw.min_bits = p.min_bits;
    aw.max_bits = p.max_bits;
    aw.min_max_quantizer = p.min_max_quantizer;
    double j_uniform = 0, j_mixed = 0, bit_sum = 0;
    for (size_t i = kv; i < p.components.size(); i += 2) {
      const RateComponent& c = p.components[i];
      aw.components.push_back({c.weight * c.model.alpha, {1.0, c.model.beta}});
      j_mixed += c.weight * distortion(c.model, bits[i]);
      bit_sum += bits[i];
    }
    const double role_bits = bit_sum / (double)aw.components.size();
    for (size_t i = kv; i < p.components.size(); i += 2)
      j_uniform += p.components[i].weight * distortion(p.components[i].model, role_bits);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%s: predicted gain AM/GM(alpha w) %.3f, measured J_uniform/J_mixed %.3f (both at its %.3f avg bits)",
                  kv ? "; " : "  per role: ", kv == 0 ? "K" : "V", am_gm_ratio(aw), j_uniform / j_mixed, role_bits);
    out += buf;
  }
  return out;
}

void allocate_ratequant(const CalibrationInputs& in, const PlanRequest& r, int64_t budget, PlanAllocation& out) {
  const RateQuantProblem p = ratequant_problem(in, r, budget);
  const bool combined = r.method == PlanMethod::combined;
  const RateQuantResult res = combined ? combined_allocate(p, r.dims.n_layer, r.dims.n_head_kv).ratequant
                                       : ratequant_allocate(p, plan_candidate_bits(r.method, r.quantizer));
  for (int l = 0; l < r.dims.n_layer; ++l)
    for (int h = 0; h < r.dims.n_head_kv; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        const size_t i = kv_component_index(l, h, kv, r.dims.n_head_kv);
        KvComponentPlan& c = out.plan.at(l, h, kv == 0 ? KvRole::key : KvRole::value);
        c.bits = res.bits[i];
        if (!combined) continue;
        for (int b = kProgressiveStartBits; b >= c.bits; b /= 2)  // shrink costs w * D(b)
          c.sensitivity[b] = p.components[i].weight * distortion(p.components[i].model, b);
      }
  out.plan.solve.method = kv_plan_method(r.method);
  out.plan.solve.objective = res.objective;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s: predicted gain AM/GM %.4f, achieved objective %.6g (uniform %.6g, gain %.4f)",
                plan_method_name(r.method), res.predicted_gain_am_gm, res.objective, res.objective_uniform,
                res.achieved_gain);
  out.summary = describe(res) + "\n" + buf + "\n" + role_gains(p, res.bits);
  if (r.force_beta > 0) out.summary += "\n  ablation: every beta forced to " + std::to_string(r.force_beta);
}

// The baseline widths of a fixed plan: the explicit split, or the widths at avg bits b: (keys, values).
std::pair<int, int> fixed_widths(const PlanRequest& r) {
  if (r.k_bits > 0) return {r.k_bits, r.v_bits};
  const int lo = (int)std::floor(r.avg_bits + 1e-9);
  const bool half = std::fabs(r.avg_bits - lo) > 1e-9;
  if (!r.progressive) return {half ? lo + 1 : lo, lo};
  if (!half && (lo == 1 || lo == 2 || lo == 4 || lo == 8)) return {lo, lo};
  if (!half && (lo == 3 || lo == 6)) return {lo == 3 ? 4 : 8, lo == 3 ? 2 : 4};
  throw Error("--method fixed --progressive: average bits " + std::to_string(r.avg_bits) +
              " are not on the ladder 1, 2, 4, 8 (or 3 = K4/V2, 6 = K8/V4)");
}

void allocate_fixed(const PlanRequest& r, PlanAllocation& out) {
  const auto [kb, vb] = fixed_widths(r);
  for (int l = 0; l < r.dims.n_layer; ++l)
    for (int h = 0; h < r.dims.n_head_kv; ++h) {
      out.plan.at(l, h, KvRole::key).bits = kb;
      out.plan.at(l, h, KvRole::value).bits = vb;
    }
  out.plan.solve.method = KvPlanMethod::fixed;
  out.plan.solve.progressive = r.progressive;
  out.summary = std::string("fixed") + (r.progressive ? " progressive" : "") + ": K" + std::to_string(kb) + "/V" +
                std::to_string(vb) + " everywhere, with the calibration's smoothing";
}

}  // namespace

KvPlanMethod kv_plan_method(PlanMethod m) {
  switch (m) {
    case PlanMethod::pmkvq: return KvPlanMethod::pmkvq;
    case PlanMethod::ratequant: return KvPlanMethod::ratequant;
    case PlanMethod::combined: return KvPlanMethod::combined;
    case PlanMethod::fixed: return KvPlanMethod::fixed;
  }
  MPKV_ASSERT(false, "PlanMethod out of range");
  return KvPlanMethod::file;
}

const char* plan_method_name(PlanMethod m) { return kv_plan_method_name(kv_plan_method(m)); }

PlanMethod parse_plan_method(const std::string& s) {
  for (PlanMethod m : {PlanMethod::pmkvq, PlanMethod::ratequant, PlanMethod::combined, PlanMethod::fixed})
    if (s == plan_method_name(m)) return m;
  throw Error("--method '" + s + "' is not one of pmkvq, ratequant, combined, fixed");
}

double budget_avg_bits(const PlanRequest& r, int64_t budget) {
  if (r.budget_bytes <= 0) return request_bits(r);
  const double t2 = uniform_plan_bytes(r, 2), t4 = uniform_plan_bytes(r, 4);
  return 2.0 + 2.0 * ((double)budget - t2) / (t4 - t2);
}

std::vector<int> plan_candidate_bits(PlanMethod m, QuantMethod q) {
  if (m == PlanMethod::pmkvq || m == PlanMethod::combined) return {2, 4, 8};
  return q == QuantMethod::turbo ? std::vector<int>{1, 2, 3, 4} : std::vector<int>{2, 3, 4, 8};
}

void validate(const PlanRequest& r) {
  MPKV_CHECK(r.method != PlanMethod::fixed || r.budget_bytes == 0, "--method fixed takes --avg-bits, not a budget");
  MPKV_CHECK(!r.progressive || r.method == PlanMethod::fixed, "--progressive applies to --method fixed only");
  MPKV_CHECK((r.k_bits > 0) == (r.v_bits > 0), "a K/V split needs both --k-bits and --v-bits");
  if (r.k_bits > 0) {
    MPKV_CHECK(r.method == PlanMethod::fixed && !r.progressive,
               "--k-bits / --v-bits apply to --method fixed (not --progressive) only");
    for (int b : {r.k_bits, r.v_bits}) {
      QuantOptions q{r.quantizer, KvRole::key, b, 64, 0};
      MPKV_CHECK(b >= 1 && b <= 8, "--k-bits / --v-bits must be in [1, 8], not " + std::to_string(b));
      validate(q);  // a width the quantizer has (Error naming it)
    }
  }
  MPKV_CHECK(!r.direct || r.method == PlanMethod::pmkvq || r.method == PlanMethod::combined,
             "--direct applies to --method pmkvq or combined");
  MPKV_CHECK(r.force_beta == 0 || (std::isfinite(r.force_beta) && r.force_beta > 1 &&
                                   (r.method == PlanMethod::ratequant || r.method == PlanMethod::combined)),
             "--force-beta must be > 1 and applies to ratequant or combined");
  MPKV_CHECK(!is_progressive(r) || r.quantizer != QuantMethod::turbo,
             std::string("--method ") + plan_method_name(r.method) +
                 " shrinks codes by halving shifts, which needs min-max codes (uniform, kivi, rotated), not turbo");
  MPKV_CHECK(!r.per_head || r.method == PlanMethod::pmkvq, "--per-head applies to --method pmkvq only");
  MPKV_CHECK(r.max_len >= 1 && r.max_len <= (1 << 24), "--max-len must be in [1, 2^24]");
  MPKV_CHECK(r.window >= 0 && r.sink >= 0, "--window and --sink must be >= 0");
  MPKV_CHECK(r.layer_windows.empty() || (int)r.layer_windows.size() == r.dims.n_layer,
             "--layer-windows has " + std::to_string(r.layer_windows.size()) + " windows, the model has " +
                 std::to_string(r.dims.n_layer) + " layers");
  for (int w : r.layer_windows) MPKV_CHECK(w >= 0, "--layer-windows must be >= 0, got " + std::to_string(w));
  MPKV_CHECK(r.budget_bytes >= 0, "the budget must be positive");
  if (r.budget_bytes == 0 && r.k_bits == 0) {
    const std::vector<int> cb = plan_candidate_bits(r.method, r.quantizer);
    MPKV_CHECK(std::isfinite(r.avg_bits) && r.avg_bits >= cb.front() && r.avg_bits <= cb.back(),
               "--avg-bits " + std::to_string(r.avg_bits) + " is outside [" + std::to_string(cb.front()) + ", " +
                   std::to_string(cb.back()) + "] for --method " + plan_method_name(r.method) + " with the " +
                   method_name(r.quantizer) + " quantizer");
  }
}

KvPlan request_plan(const PlanRequest& r, int bits) {
  KvCacheOptions o;
  o.method = parse_kv_method(method_name(r.quantizer));  // the cache method of that quantizer
  o.bits = bits;
  o.window = r.window;
  o.sink = r.sink;
  KvPlan p = make_kv_plan(o, r.dims);
  p.layer_windows = r.layer_windows;
  p.progressive = is_progressive(r);
  p.model = r.model;
  validate(p, r.dims, r.model);
  return p;
}

int64_t plan_bytes(const KvPlan& plan, int64_t max_len) {
  MPKV_CHECK(max_len >= 1 && max_len <= (1 << 24), "plan bytes: max_len outside [1, 2^24]");
  return (int64_t)KvByteModel(plan.dims, plan).sequence_bytes_bound((int)max_len);
}

double uniform_plan_bytes(const PlanRequest& r, double bits) {
  const double t2 = (double)plan_bytes(request_plan(r, 2), r.max_len);
  const double t4 = (double)plan_bytes(request_plan(r, 4), r.max_len);
  return t2 + (bits - 2.0) / 2.0 * (t4 - t2);
}

int64_t resolve_budget(const PlanRequest& r) {
  validate(r);
  const int64_t budget = r.budget_bytes > 0 ? r.budget_bytes : (int64_t)std::floor(uniform_plan_bytes(r, request_bits(r)));
  const int lo_bits = plan_candidate_bits(r.method, r.quantizer).front();
  const int64_t lo = plan_bytes(request_plan(r, lo_bits), r.max_len);
  MPKV_CHECK(budget >= lo, "a budget of " + mib((double)budget) + " (" + std::to_string(budget) +
                               " bytes) cannot hold " + std::to_string(r.max_len) + " tokens at " +
                               std::to_string(lo_bits) + " bits; the smallest feasible budget is " + mib((double)lo) +
                               " (" + std::to_string(lo) + " bytes)");
  return budget;
}

PlanAllocation allocate_plan(const CalibrationInputs& in, const PlanRequest& r) {
  const int64_t budget = resolve_budget(r);
  validate(in, r.dims.n_layer, r.dims.n_head_kv);
  MPKV_CHECK(in.quantizer == r.quantizer, std::string("calibrated for the ") + method_name(in.quantizer) +
                                              " quantizer, the plan asks for " + method_name(r.quantizer));
  PlanAllocation out;
  out.plan = request_plan(r, plan_candidate_bits(r.method, r.quantizer).front());
  out.plan.method = kv_plan_method(r.method);
  out.plan.smoothing = in.smoothing.lambda;
  if (r.method == PlanMethod::pmkvq) {
    allocate_pmkvq(in, r, budget, out);
  } else if (r.method == PlanMethod::fixed) {
    allocate_fixed(r, out);
  } else {
    allocate_ratequant(in, r, budget, out);
  }
  if (r.direct) {  // ablation: the same finals, quantized directly (no shift, no 16-bit pages)
    out.plan.progressive = false;
    for (KvComponentPlan& c : out.plan.components) c.sensitivity.clear();
    out.plan.solve.direct = true;
    out.summary += "\n  ablation: finals quantized directly (not progressive)";
  }
  KvPlanSolve& s = out.plan.solve;
  s.max_len = r.max_len;
  s.budget_bytes = budget;
  s.target_avg_bits = r.budget_bytes > 0 ? 0 : request_bits(r);
  s.bytes = plan_bytes(out.plan, r.max_len);
  if (r.method == PlanMethod::fixed) s.budget_bytes = s.bytes;  // nothing was solved: its own bytes
  double sum = 0;
  for (const KvComponentPlan& c : out.plan.components) sum += c.bits;
  s.avg_bits = sum / (double)out.plan.components.size();
  MPKV_ASSERT(s.bytes <= s.budget_bytes, "plan allocation: the plan needs " + std::to_string(s.bytes) +
                                     " bytes, over its budget of " + std::to_string(budget));
  out.plan.provenance = {in.calib_file, in.calib_n, in.calib_len, in.pi_scale, !in.smoothing.empty(), ""};
  validate(out.plan, r.dims, r.model);
  out.summary += "\n" + mib((double)s.bytes) + " of " + mib((double)budget) + " budget (" + std::to_string(s.bytes) +
                 " / " + std::to_string(budget) + " bytes, the cache's count for one sequence of " +
                 std::to_string(r.max_len) + " tokens)";
  return out;
}

}  // namespace mpkv::calib

// The allocation stage of calibration (src/calib/plan_allocation.h) on synthetic calibration
// inputs: one byte model (a plan solved for budget B runs max_len tokens in a PagedKvCache of budget
// B and uses at least 97% of it), faithful PM-KVQ plans (progressive, finals on {2, 4, 8}, shrink
// costs), and the calibration inputs' JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <tuple>

#include "calib/plan_allocation.h"
#include "kvcache/paged_kv_cache.h"
#include "test_kvcache_support.h"
#include "util/error.h"

namespace mpkv::calib {
namespace {

const KvDims kDims{4, 4, 2, 64};  // 4 layers, 2 KV heads, head_dim 64
// The same with layers 0 and 2 sliding over 100 positions (max_len 1000): their bits cost fewer
// bytes (KvByteModel::window_pages_bound), which every method must account for.
const KvDims kWindowedDims{4, 4, 2, 64, {100, 0, 100, 0}};

// Sensitivities ~ scale_l * 4^-b (layer 0 the most sensitive), RateQuant weights per component.
CalibrationInputs synthetic_inputs(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.7, 1.3);
  CalibrationInputs in;
  in.model = {"llama", 0x1234};
  in.bits = {2, 3, 4, 8};
  for (int l = 0; l < kDims.n_layer; ++l) {
    const double scale = std::pow(8.0, kDims.n_layer - 1 - l);
    std::vector<std::vector<double>> k, v;
    std::vector<double> wk, wv;
    for (int h = 0; h < kDims.n_head_kv; ++h) {
      std::vector<double> sk, sv;
      for (int b : in.bits) {
        sk.push_back(scale * std::pow(4.0, -b) * u(rng));
        sv.push_back(scale * std::pow(4.0, -b) * u(rng));
      }
      k.push_back(sk);
      v.push_back(sv);
      wk.push_back(scale * u(rng));
      wv.push_back(scale * u(rng));
    }
    in.pmkvq_k.push_back(k);
    in.pmkvq_v.push_back(v);
    in.w_k.push_back(wk);
    in.w_v.push_back(wv);
  }
  in.fit_k = {1.0, 3.8, 0.99};
  in.fit_v = {0.5, 3.9, 0.99};
  return in;
}

PlanRequest request(PlanMethod m, double avg_bits, bool per_head = false, const KvDims& dims = kDims) {
  PlanRequest r;
  r.method = m;
  r.per_head = per_head;
  r.dims = dims;
  r.model = {"llama", 0x1234};
  r.max_len = 1000;
  r.window = 8;
  r.sink = 1;
  r.avg_bits = avg_bits;
  return r;
}

// Appends n tokens to sequence 0 in chunks of up to `chunk`, halving a chunk whose reservation does
// not fit, as the engine's prefill does (a reservation holds room for the chunk's new 16-bit pages
// before the open page is full and can shrink); false when even one token does not fit.
bool run_to(PagedKvCache& c, int n, int chunk) {
  for (int done = 0, step = 0; done < n; ++step) {
    int m = std::min(chunk, n - done);
    while (!c.reserve(0, m)) {
      if (m == 1) return false;
      m /= 2;
    }
    for (int l = 0; l < c.dims().n_layer; ++l) {
      const auto k = test::random_kv(m, c.dims(), 100 + step * 7 + l, true);
      const auto v = test::random_kv(m, c.dims(), 200 + step * 7 + l, false);
      c.append(0, l, m, k.data(), v.data());
    }
    done += m;
  }
  return true;
}

// The plan's bytes are the cache's bytes (kvcache/kv_byte_model.h); with sliding-window layers too
// (docs/gemma3.md "Admission"), where the peak, not the end, is what the bound holds (a windowed layer's live pages
// go up and down as its window moves over page boundaries).
TEST(PlanAllocation, PlanForBudgetRunsMaxLenInThatBudgetAndUsesIt) {
  const CalibrationInputs in = synthetic_inputs(1);
  struct Case {
    PlanMethod m;
    bool per_head;
    double avg_bits;
  };
  for (const KvDims& dims : {kDims, kWindowedDims})
  for (const Case& cs : {Case{PlanMethod::pmkvq, false, 3.0}, Case{PlanMethod::pmkvq, true, 2.6},
                         Case{PlanMethod::pmkvq, false, 5.5}, Case{PlanMethod::combined, false, 3.0},
                         Case{PlanMethod::ratequant, false, 2.5}, Case{PlanMethod::ratequant, false, 3.5}}) {
    const bool windowed = !dims.window.empty();
    const PlanRequest r = request(cs.m, cs.avg_bits, cs.per_head, dims);
    const PlanAllocation a = allocate_plan(in, r);
    const int64_t B = a.plan.solve.budget_bytes;
    const std::string what = std::string(plan_method_name(cs.m)) + (cs.per_head ? " per head" : "") + " at " +
                             std::to_string(cs.avg_bits) + " bits" + (windowed ? ", windowed layers" : "");
    ASSERT_EQ(B, (int64_t)std::floor(uniform_plan_bytes(r, cs.avg_bits))) << what;
    ASSERT_LE(a.plan.solve.bytes, B) << what;
    PagedKvCache cache(dims, a.plan, (size_t)B);
    EXPECT_EQ((int64_t)cache.byte_model().sequence_bytes_bound((int)r.max_len), a.plan.solve.bytes) << what;
    ASSERT_TRUE(run_to(cache, (int)r.max_len, 37)) << what << ": stopped for the budget";
    EXPECT_LE(cache.pool().peak_used(), (size_t)B) << what;
    const size_t used = windowed ? cache.pool().peak_used() : cache.bytes_used();
    EXPECT_GE((double)used, 0.97 * (double)B) << what << ": uses " << used << " of " << B;
    if (!a.plan.progressive && !windowed) {
      EXPECT_EQ((int64_t)cache.bytes_used(), a.plan.solve.bytes) << what;
    }
  }
}

TEST(PlanAllocation, PmkvqIsProgressiveOnTheLadderWithShrinkCosts) {
  const CalibrationInputs in = synthetic_inputs(2);
  for (bool per_head : {false, true}) {
    const PlanAllocation a = allocate_plan(in, request(PlanMethod::pmkvq, 4.0, per_head));
    EXPECT_TRUE(a.plan.progressive);
    EXPECT_STREQ(kv_plan_method_name(a.plan.method), "pmkvq");
    EXPECT_EQ(solve_method_name(a.plan.solve), per_head ? "pmkvq-per-head" : "pmkvq");
    std::set<int> seen;
    for (int l = 0; l < kDims.n_layer; ++l)
      for (int h = 0; h < kDims.n_head_kv; ++h) {
        const KvComponentPlan& k = a.plan.at(l, h, KvRole::key);
        const KvComponentPlan& v = a.plan.at(l, h, KvRole::value);
        EXPECT_TRUE(k.bits == 2 || k.bits == 4 || k.bits == 8) << k.bits;
        EXPECT_EQ(k.bits, v.bits) << "a block's K and V share its width";
        if (!per_head) {
          EXPECT_EQ(k.bits, a.plan.at(l, 0, KvRole::key).bits) << "one width per layer";
        }
        seen.insert(k.bits);
        for (int b : {16, 8, 4, 2}) ASSERT_TRUE(k.sensitivity.count(b)) << b;
        EXPECT_DOUBLE_EQ(k.sensitivity.at(4), in.pmkvq_k[l][h][2]);
        EXPECT_LT(k.sensitivity.at(16), k.sensitivity.at(8));
      }
    // Layer 0 is 8^3 times as sensitive as layer 3: it gets at least as many bits.
    EXPECT_GE(a.plan.at(0, 0, KvRole::key).bits, a.plan.at(3, 0, KvRole::key).bits);
    EXPECT_GT(seen.size(), 1u) << "a budget between widths mixes them";
  }
}

// The ablation switches (docs/results/ablation.md): fixed baselines carry the smoothing, --direct keeps the
// finals but not the shift, --force-beta changes RateQuant's allocation, per-component fits are used.
TEST(PlanAllocation, AblationVariants) {
  CalibrationInputs in = synthetic_inputs(3);
  in.smoothing.n_layer = kDims.n_layer;
  in.smoothing.lambda.assign(kDims.n_layer, std::vector<float>(kDims.n_head_kv * kDims.head_dim, 2.0f));
  PlanRequest r = request(PlanMethod::fixed, 2.5);
  PlanAllocation a = allocate_plan(in, r);
  EXPECT_FALSE(a.plan.progressive);
  EXPECT_EQ(a.plan.at(1, 1, KvRole::key).bits, 3);
  EXPECT_EQ(a.plan.at(1, 1, KvRole::value).bits, 2);
  EXPECT_EQ(a.plan.smoothing, in.smoothing.lambda);
  EXPECT_EQ(a.plan.solve.bytes, a.plan.solve.budget_bytes);
  r = request(PlanMethod::fixed, 3.0);
  r.progressive = true;
  a = allocate_plan(in, r);
  EXPECT_TRUE(a.plan.progressive);
  EXPECT_EQ(a.plan.at(0, 0, KvRole::key).bits, 4);
  EXPECT_EQ(a.plan.at(0, 0, KvRole::value).bits, 2);
  r.avg_bits = 2.5;
  EXPECT_THROW(allocate_plan(in, r), Error);  // not on the ladder

  r = request(PlanMethod::pmkvq, 3.0);
  const PlanAllocation prog = allocate_plan(in, r);
  r.direct = true;
  const PlanAllocation direct = allocate_plan(in, r);
  EXPECT_TRUE(prog.plan.progressive);
  EXPECT_FALSE(direct.plan.progressive);
  for (size_t i = 0; i < prog.plan.components.size(); ++i)
    EXPECT_EQ(direct.plan.components[i].bits, prog.plan.components[i].bits);
  EXPECT_LT(direct.plan.solve.bytes, prog.plan.solve.bytes);  // no 16-bit newest page

  r = request(PlanMethod::ratequant, 3.0);
  const PlanAllocation fitted = allocate_plan(in, r);
  EXPECT_NE(fitted.summary.find("per role: K: predicted gain AM/GM(alpha w)"), std::string::npos);
  r.force_beta = 1.2;  // a flat distortion curve: bits buy little, weights dominate
  const PlanAllocation wrong = allocate_plan(in, r);
  int differ = 0;
  for (size_t i = 0; i < fitted.plan.components.size(); ++i)
    differ += fitted.plan.components[i].bits != wrong.plan.components[i].bits;
  EXPECT_GT(differ, 0);
  // Per-component fits replace the pooled one: a component whose D is 1000x larger gets more bits.
  in.fits.bits = {2, 3, 4, 8};
  in.fits.key.assign(kDims.n_layer, std::vector<ExponentialFit>(kDims.n_head_kv, in.fit_k));
  in.fits.value.assign(kDims.n_layer, std::vector<ExponentialFit>(kDims.n_head_kv, in.fit_v));
  in.fits.value[3][1].alpha *= 1000;
  r.force_beta = 0;
  const PlanAllocation per = allocate_plan(in, r);
  EXPECT_GT(per.plan.at(3, 1, KvRole::value).bits, fitted.plan.at(3, 1, KvRole::value).bits);
  r.method = PlanMethod::pmkvq;
  r.force_beta = 2;
  EXPECT_THROW(allocate_plan(in, r), Error);  // --force-beta is RateQuant's
}

// Fixed K/V splits (RateQuant against the best uniform split with the same quantizer and smoothing,
// docs/calibration.md): every split at b holds exactly the bytes RateQuant's plan at b is solved for.
TEST(PlanAllocation, FixedSplitsHoldTheBytesOfTheRateQuantBudget) {
  CalibrationInputs in = synthetic_inputs(5);
  in.smoothing.n_layer = kDims.n_layer;
  in.smoothing.lambda.assign(kDims.n_layer, std::vector<float>(kDims.n_head_kv * kDims.head_dim, 1.5f));
  for (const auto& [k, v, b] : {std::tuple{4, 2, 3.0}, {3, 3, 3.0}, {2, 4, 3.0}, {3, 2, 2.5}, {2, 3, 2.5}}) {
    PlanRequest r = request(PlanMethod::fixed, 0);
    r.k_bits = k;
    r.v_bits = v;
    const PlanAllocation a = allocate_plan(in, r);
    EXPECT_FALSE(a.plan.progressive);
    EXPECT_EQ(a.plan.smoothing, in.smoothing.lambda);
    for (int l = 0; l < kDims.n_layer; ++l)
      for (int h = 0; h < kDims.n_head_kv; ++h) {
        EXPECT_EQ(a.plan.at(l, h, KvRole::key).bits, k);
        EXPECT_EQ(a.plan.at(l, h, KvRole::value).bits, v);
      }
    EXPECT_DOUBLE_EQ(a.plan.solve.avg_bits, b);
    const PlanRequest rq = request(PlanMethod::ratequant, b);
    EXPECT_EQ(a.plan.solve.bytes, resolve_budget(rq)) << "K" << k << "/V" << v;
    const PlanAllocation q = allocate_plan(in, rq);
    EXPECT_LE(q.plan.solve.bytes, a.plan.solve.bytes);
    EXPECT_EQ(q.plan.smoothing, a.plan.smoothing);
  }
  PlanRequest r = request(PlanMethod::fixed, 0);
  r.k_bits = 4;  // without --v-bits
  EXPECT_THROW(allocate_plan(in, r), Error);
  r.v_bits = 5;  // not a width of the uniform quantizer
  EXPECT_THROW(allocate_plan(in, r), Error);
  r.v_bits = 2;
  r.progressive = true;
  EXPECT_THROW(allocate_plan(in, r), Error);
  r.progressive = false;
  r.method = PlanMethod::ratequant;
  EXPECT_THROW(allocate_plan(in, r), Error);
}

// A byte target at a stated context (budget_bytes for max_len tokens) with per-layer fp16 windows:
// the solver counts each layer's window, the plan records the windows and what it was solved for,
// the cache holds exactly the byte model's figure at max_len and stays within the target; a
// target below the smallest plan is refused naming the smallest feasible one; windows of the
// wrong count are refused.
TEST(PlanAllocation, ByteTargetAtAContextCountsPerLayerWindows) {
  const CalibrationInputs in = synthetic_inputs(5);
  for (PlanMethod m : {PlanMethod::ratequant, PlanMethod::combined, PlanMethod::pmkvq}) {
    PlanRequest r = request(m, 0);
    r.max_len = 700;
    PlanRequest wide = r;  // one 128-token window everywhere: the target lies between its 2- and 4-bit plans
    wide.layer_windows.assign(4, 128);
    r.layer_windows = {0, 64, 8, 128};
    const int64_t lo = plan_bytes(request_plan(r, 2), r.max_len);
    r.budget_bytes = (plan_bytes(request_plan(wide, 2), r.max_len) + plan_bytes(request_plan(wide, 4), r.max_len)) / 2;
    wide.budget_bytes = r.budget_bytes;
    const std::string what = plan_method_name(m);
    const PlanAllocation a = allocate_plan(in, r);
    EXPECT_EQ(a.plan.layer_windows, r.layer_windows) << what;
    EXPECT_EQ(a.plan.solve.max_len, 700) << what;
    EXPECT_EQ(a.plan.solve.budget_bytes, r.budget_bytes) << what;
    EXPECT_EQ(a.plan.solve.target_avg_bits, 0) << what;
    ASSERT_LE(a.plan.solve.bytes, r.budget_bytes) << what;
    // The windows cost bytes: the same target with one 128-token window everywhere buys fewer bits.
    EXPECT_LT(allocate_plan(in, wide).plan.solve.avg_bits, a.plan.solve.avg_bits) << what;
    PagedKvCache cache(kDims, a.plan, (size_t)r.budget_bytes);
    ASSERT_TRUE(run_to(cache, (int)r.max_len, 37)) << what << ": stopped for the budget";
    EXPECT_LE(cache.pool().peak_used(), (size_t)r.budget_bytes) << what;
    const KvByteModel& bm = cache.byte_model();
    if (!a.plan.progressive) {
      EXPECT_EQ((int64_t)cache.bytes_used(), a.plan.solve.bytes) << what;
    }
    cache.shrink(SIZE_MAX);
    EXPECT_EQ(cache.bytes_used(), bm.sequence_bytes((int)r.max_len, true)) << what;
    PlanRequest tight = r;
    tight.budget_bytes = lo - 1;
    try {
      allocate_plan(in, tight);
      ADD_FAILURE() << what << ": expected an Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("smallest feasible budget is"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(lo) + " bytes"), std::string::npos) << e.what();
    }
  }
  PlanRequest bad = request(PlanMethod::ratequant, 3.0);
  bad.layer_windows = {8, 8};
  EXPECT_THROW(allocate_plan(in, bad), Error);
}

TEST(PlanAllocation, RejectsWhatCannotBeSolved) {
  const CalibrationInputs in = synthetic_inputs(3);
  PlanRequest r = request(PlanMethod::pmkvq, 3.0);
  r.budget_bytes = 1000;  // far below every component at 2 bits
  try {
    allocate_plan(in, r);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("smallest feasible budget"), std::string::npos) << e.what();
  }
  r = request(PlanMethod::pmkvq, 3.0);
  r.quantizer = QuantMethod::turbo;
  EXPECT_THROW(allocate_plan(in, r), Error);  // progressive needs min-max codes
  r = request(PlanMethod::ratequant, 3.0, true);
  EXPECT_THROW(allocate_plan(in, r), Error);  // per head is PM-KVQ's
  CalibrationInputs no8 = in;
  no8.bits = {2, 3, 4, 16};
  EXPECT_THROW(allocate_plan(no8, request(PlanMethod::pmkvq, 3.0)), Error);
  CalibrationInputs bad = in;
  bad.w_k.pop_back();
  EXPECT_THROW(allocate_plan(bad, request(PlanMethod::ratequant, 3.0)), Error);
  EXPECT_THROW(parse_plan_method("progressive"), Error);
}

TEST(CalibrationInputsJson, RoundTripsAndRejectsOtherFiles) {
  const CalibrationInputs in = synthetic_inputs(4);
  const nlohmann::json j = in;
  const CalibrationInputs back = j.get<CalibrationInputs>();
  EXPECT_EQ(back.pmkvq_k, in.pmkvq_k);
  EXPECT_EQ(back.w_v, in.w_v);
  EXPECT_EQ(back.bits, in.bits);
  EXPECT_EQ(back.model.tensor_layout_hash, in.model.tensor_layout_hash);
  EXPECT_EQ(back.fit_v.beta, in.fit_v.beta);
  nlohmann::json other = j;
  other["format"] = "mpkv-kv-plan";
  EXPECT_THROW(other.get<CalibrationInputs>(), Error);
  nlohmann::json broken = j;
  broken["sensitivity"].erase("pmkvq_key");
  EXPECT_THROW(broken.get<CalibrationInputs>(), Error);
}

}  // namespace
}  // namespace mpkv::calib

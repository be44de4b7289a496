// The KV plan (JSON round trip, rejections with clear messages), the options -> cache factory and
// the page pool's bookkeeping (budget arithmetic, shrink order).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "kvcache/kv_cache_factory.h"
#include "kvcache/page_pool.h"
#include "kvcache/paged_kv_cache.h"
#include "kvcache/run_budget.h"
#include "test_support.h"
#include "util/error.h"

namespace mpkv {
namespace {

const KvDims kDims{30, 9, 3, 64};  // SmolLM2-135M

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    FAIL() << "expected an Error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "message: " << e.what();
  }
}

TEST(KvPlan, JsonRoundTripKeepsEveryComponent) {
  KvCacheOptions o;
  o.method = KvMethod::progressive;
  o.bits = 2;
  KvPlan p = make_kv_plan(o, kDims);
  p.at(3, 1, KvRole::key).bits = 4;
  p.at(29, 2, KvRole::value).bits = 8;
  p.at(0, 0, KvRole::key).quantizer = QuantMethod::kivi;
  p.at(0, 0, KvRole::key).group = 32;
  const KvPlan q = kv_plan_from_json(kv_plan_to_json(p), kDims);
  EXPECT_TRUE(q.progressive);
  EXPECT_EQ(q.window, 128);
  EXPECT_EQ(q.sink, 1);
  EXPECT_EQ(q.page_tokens, 64);
  ASSERT_EQ(q.components.size(), p.components.size());
  for (size_t i = 0; i < p.components.size(); ++i) {
    EXPECT_EQ(q.components[i].bits, p.components[i].bits) << i;
    EXPECT_EQ(q.components[i].quantizer, p.components[i].quantizer) << i;
    EXPECT_EQ(q.components[i].group, p.components[i].group) << i;
    EXPECT_EQ(q.components[i].fp16, p.components[i].fp16) << i;
  }
}

TEST(KvPlan, SmallHandWrittenFileWithDefaultAndOverrides) {
  const std::string text = R"({"format": "mpkv-kv-plan", "version": 1,
    "model": {"n_layer": 30, "n_head_kv": 3, "head_dim": 64},
    "progressive": true, "window": 64,
    "default": {"quantizer": "uniform", "bits": 2},
    "components": [{"layer": 0, "head": 2, "role": "value", "bits": 8},
                   {"layer": 5, "head": 0, "role": "k", "quantizer": "f16"}]})";
  const KvPlan p = kv_plan_from_json(text, kDims);
  EXPECT_EQ(p.window, 64);
  EXPECT_EQ(p.sink, 1);
  EXPECT_EQ(p.at(0, 2, KvRole::value).bits, 8);
  EXPECT_EQ(p.at(0, 2, KvRole::key).bits, 2);
  EXPECT_TRUE(p.at(5, 0, KvRole::key).fp16);
  EXPECT_EQ(p.at(29, 1, KvRole::value).bits, 2);
  // Through a file and the factory.
  const std::string path = test::temp_dir() + "/plan.json";
  std::ofstream(path) << text;
  KvCacheOptions o;
  o.plan_file = path;
  o.sink = 4;  // explicit options still override the file
  auto c = make_kv_cache(o, kDims);
  EXPECT_EQ(c->plan().sink, 4);
  EXPECT_EQ(c->plan().window, 64);
}

TEST(KvPlan, RejectsBadFilesWithTheReason) {
  const std::string head = R"({"format": "mpkv-kv-plan", "version": 1, "model": {"n_layer": 30, "n_head_kv": 3, "head_dim": 64})";
  expect_error([&] { kv_plan_from_json("{not json", kDims); }, "not valid JSON");
  expect_error([&] { kv_plan_from_json(R"({"format": "other"})", kDims); }, "not a KV plan");
  expect_error([&] { kv_plan_from_json(R"({"format": "mpkv-kv-plan", "version": 2})", kDims); }, "version");
  expect_error([&] { kv_plan_from_json(head + "}", KvDims{24, 9, 3, 64}); }, "30 layers");
  expect_error([&] { kv_plan_from_json(head + R"(, "progressive": true, "default": {"quantizer": "turbo", "bits": 2}})", kDims); },
               "cannot be shrunk");
  expect_error([&] { kv_plan_from_json(head + R"(, "progressive": true, "default": {"quantizer": "uniform", "bits": 3}})", kDims); },
               "ladder");
  expect_error([&] { kv_plan_from_json(head + R"(, "page_tokens": 48, "default": {"quantizer": "kivi", "bits": 2, "group": 32}})", kDims); },
               "does not divide page_tokens");
  expect_error([&] { kv_plan_from_json(head + R"(, "default": {"quantizer": "magic", "bits": 2}})", kDims); }, "magic");
  expect_error([&] { kv_plan_from_json(head + R"(, "default": {"quantizer": "uniform", "bits": 5}})", kDims); }, "bits 5");
  expect_error([&] { kv_plan_from_json(head + R"(, "components": [{"layer": 30, "head": 0, "role": "key"}]})", kDims); },
               "layer 30 out of range");
  expect_error([&] { kv_plan_from_json(head + R"(, "window": -3})", kDims); }, "window");
  expect_error([&] { load_kv_plan("/nonexistent/plan.json", kDims); }, "cannot read KV plan");
}

// Per-layer fp16 windows: written only when set, read back, checked (the error names the field and
// nothing is returned), and overridden as a whole by --kv-window.
TEST(KvPlan, PerLayerWindowsRoundTripAndAreChecked) {
  KvCacheOptions o;
  o.method = KvMethod::kivi;
  o.bits = 2;
  KvPlan p = make_kv_plan(o, kDims);
  EXPECT_EQ(kv_plan_to_json(p).find("layer_windows"), std::string::npos) << "not written when unset";
  p.layer_windows.assign(30, 32);
  p.layer_windows[0] = 128;
  p.layer_windows[29] = 0;
  const KvPlan q = kv_plan_from_json(kv_plan_to_json(p), kDims);
  EXPECT_EQ(q.layer_windows, p.layer_windows);
  EXPECT_EQ(q.fp16_window(0), 128);
  EXPECT_EQ(q.fp16_window(5), 32);
  EXPECT_EQ(q.fp16_window(29), 0);
  EXPECT_EQ(q.min_fp16_window(), 0);
  const std::string head = R"({"format": "mpkv-kv-plan", "version": 1, "model": {"n_layer": 30, "n_head_kv": 3, "head_dim": 64},
    "default": {"quantizer": "uniform", "bits": 2})";
  std::string neg = "[";
  for (int l = 0; l < 30; ++l) neg += std::string(l ? "," : "") + (l == 7 ? "-1" : "16");
  neg += "]";
  expect_error([&] { kv_plan_from_json(head + R"(, "layer_windows": [16, 16]})", kDims); },
               "layer_windows has 2 entries, expected one per layer (30)");
  expect_error([&] { kv_plan_from_json(head + R"(, "layer_windows": )" + neg + "}", kDims); },
               "layer_windows[7] = -1 outside [0, 2^20]");
  expect_error([&] { kv_plan_from_json(head + R"(, "layer_windows": 16})", kDims); },
               "'layer_windows' must be an array of integers");
  expect_error([&] { kv_plan_from_json(head + R"(, "layer_windows": [16.5]})", kDims); },
               "'layer_windows' must be an array of integers");
  // --kv-window replaces every layer's window.
  const std::string path = test::temp_dir() + "/layer_windows.json";
  std::ofstream(path) << kv_plan_to_json(p);
  KvCacheOptions f;
  f.plan_file = path;
  EXPECT_EQ(make_kv_plan(f, kDims).fp16_window(0), 128);
  f.window = 48;
  const KvPlan r = make_kv_plan(f, kDims);
  EXPECT_TRUE(r.layer_windows.empty());
  EXPECT_EQ(r.fp16_window(0), 48);
  EXPECT_EQ(r.fp16_window(29), 48);
}

// Plans written before per-layer windows existed (the committed calibrated plans) load as they
// did: one window for every layer, and the same JSON back.
TEST(KvPlan, PlansWithoutPerLayerWindowsLoadUnchanged) {
  for (const char* name : {"plans_kivi/combined_2.5", "plans/combined_2", "plans_kivi/pmkvq_2"}) {
    const std::string file = std::string(MPKV_SOURCE_DIR) + "/docs/results/" + name + ".json";
    const KvPlan p = load_kv_plan(file, kDims);
    EXPECT_TRUE(p.layer_windows.empty()) << name;
    EXPECT_EQ(p.window, 128) << name;
    for (int l = 0; l < 30; ++l) EXPECT_EQ(p.fp16_window(l), 128) << name;
    EXPECT_EQ(kv_plan_to_json(kv_plan_from_json(kv_plan_to_json(p), kDims)), kv_plan_to_json(p)) << name;
    EXPECT_EQ(kv_plan_to_json(p).find("layer_windows"), std::string::npos) << name;
  }
}

// A plan for a model with sliding-window layers records them (model.sliding_window, the bit maps
// mark them) and is refused by a model with other windows.
TEST(KvPlan, SlidingWindowsTravelAndAreChecked) {
  const KvDims windowed{6, 4, 1, 32, {5, 5, 5, 5, 5, 0}};
  KvCacheOptions o;
  o.method = KvMethod::uniform;
  const std::string text = kv_plan_to_json(make_kv_plan(o, windowed));
  EXPECT_NE(text.find("\"sliding_window\""), std::string::npos);
  EXPECT_EQ(kv_plan_from_json(text, windowed).dims.window, windowed.window);
  KvDims other = windowed;
  other.window = {5, 5, 5, 5, 0, 0};
  expect_error([&] { kv_plan_from_json(text, other); }, "sliding windows [5,5,5,5,5,0]");
  other.window.clear();
  expect_error([&] { kv_plan_from_json(text, other); }, "this model has [0,0,0,0,0,0]");
  EXPECT_EQ(kv_plan_to_json(make_kv_plan(o, other)).find("sliding_window"), std::string::npos);
}

// Shrink costs travel in the plan file; a progressive plan needs s(b) down its whole ladder.
TEST(KvPlan, SensitivitiesRoundTripAndAreChecked) {
  KvCacheOptions o;
  o.method = KvMethod::progressive;
  o.bits = 4;
  KvPlan p = make_kv_plan(o, kDims);
  for (KvComponentPlan& c : p.components) c.sensitivity = {{16, 0.001}, {8, 0.5}, {4, 2.0}};
  const KvPlan q = kv_plan_from_json(kv_plan_to_json(p), kDims);
  EXPECT_EQ(q.at(7, 2, KvRole::value).sensitivity, p.at(7, 2, KvRole::value).sensitivity);
  EXPECT_TRUE(has_shrink_costs(q));
  p.at(3, 1, KvRole::key).sensitivity.erase(8);
  expect_error([&] { validate(p, kDims); }, "sensitivity must give a finite s(8)");
  p.at(3, 1, KvRole::key).sensitivity.clear();  // costs on some components means costs on all
  expect_error([&] { validate(p, kDims); }, "s(16)");
  const std::string head = R"({"format": "mpkv-kv-plan", "version": 1, "model": {"n_layer": 30, "n_head_kv": 3, "head_dim": 64})";
  expect_error([&] { kv_plan_from_json(head + R"(, "default": {"quantizer": "uniform", "bits": 2, "sensitivity": [1]}})", kDims); },
               "sensitivity must be an object");
}

// A progressive plan without --kv-budget-mib gets the budget it was solved for.
TEST(KvCacheFactory, ProgressivePlanFileGetsItsSolvedBudget) {
  KvCacheOptions o;
  o.method = KvMethod::progressive;
  o.bits = 2;
  KvPlan p = make_kv_plan(o, kDims);
  p.solve.method = KvPlanMethod::pmkvq;
  p.solve.budget_bytes = 12345678;
  p.solve.max_len = 4096;
  const std::string path = test::temp_dir() + "/progressive_plan.json";
  std::ofstream(path) << kv_plan_to_json(p);
  KvCacheOptions f;
  f.plan_file = path;
  EXPECT_EQ(make_kv_cache(f, kDims)->pool().budget(), 12345678u);
  f.budget_mib = 20;  // an explicit budget wins
  EXPECT_EQ(make_kv_cache(f, kDims)->pool().budget(), 20u << 20);
  p.progressive = false;  // a fixed-width plan never shrinks: no budget unless asked
  std::ofstream(path) << kv_plan_to_json(p);
  f.budget_mib = 0;
  EXPECT_EQ(make_kv_cache(f, kDims)->pool().budget(), 0u);
}

TEST(KvCacheFactory, RejectsBadOptionsBeforeAnyWork) {
  KvCacheOptions o;
  expect_error([&] { parse_kv_method("q4"); }, "--kv-method 'q4'");
  o = {};
  o.budget_mib = -1;
  expect_error([&] { validate(o); }, "--kv-budget-mib");
  o = {};
  o.bits = 0;
  expect_error([&] { validate(o); }, "--kv-bits");
  o = {};
  o.method = KvMethod::uniform;
  o.bits = 5;
  expect_error([&] { make_kv_plan(o, kDims); }, "bits 5");
  o = {};
  o.method = KvMethod::progressive;
  o.bits = 3;
  expect_error([&] { make_kv_plan(o, kDims); }, "ladder");
  o = {};
  o.method = KvMethod::progressive;
  o.bits = 2;
  o.budget_mib = 0.5;  // the fixed sink + window buffers alone are 30 x 2 x 193 x 3 x 64 x 2 bytes (~4.2 MiB)
  expect_error([&] { make_kv_cache(o, kDims); }, "cannot hold even one sequence");
  o = {};
  o.method = KvMethod::uniform;
  o.group = 24;
  expect_error([&] { make_kv_plan(o, kDims); }, "group 24");
}

TEST(KvCacheFactory, MethodsBecomePlans) {
  KvCacheOptions o;
  KvPlan p = make_kv_plan(o, kDims);  // f16
  EXPECT_TRUE(p.at(0, 0, KvRole::key).fp16);
  EXPECT_EQ(p.window, 0);
  EXPECT_EQ(p.sink, 0);
  o.method = KvMethod::kivi;
  o.bits = 2;
  p = make_kv_plan(o, kDims);
  EXPECT_EQ(p.at(4, 1, KvRole::key).quantizer, QuantMethod::kivi);
  EXPECT_EQ(p.window, 128);
  EXPECT_EQ(p.page_tokens % 32, 0);
  o.method = KvMethod::uniform;
  o.k_bits = 8;
  o.v_bits = 4;
  p = make_kv_plan(o, kDims);
  EXPECT_EQ(p.at(7, 2, KvRole::key).bits, 8);
  EXPECT_EQ(p.at(7, 2, KvRole::value).bits, 4);
  EXPECT_FALSE(p.progressive);
  o = {};
  o.method = KvMethod::progressive;
  o.bits = 2;
  p = make_kv_plan(o, kDims);
  EXPECT_TRUE(p.progressive);
  EXPECT_EQ(p.at(0, 0, KvRole::value).quantizer, QuantMethod::uniform);
}

// A progressive plan without a budget, run for shorter sequences than it was solved for, gets what
// those sequences need at their final bits (not the solved budget, under which nothing would shrink).
TEST(KvRunBudget, ProgressiveWithoutBudgetGetsTheRunsBound) {
  KvCacheOptions o;
  o.method = KvMethod::progressive;
  o.bits = 2;
  const KvPlan plan = make_kv_plan(o, kDims);
  const PagedKvCache probe(kDims, plan, 0);
  const double mib = 1024.0 * 1024.0;
  for (const auto& [seqs, len] : {std::pair{1, 512}, {3, 2048}}) {
    const double got = run_budget_mib(o, kDims, seqs, len);
    const double want = seqs * (double)probe.byte_model().sequence_bytes_bound(len);
    EXPECT_GE(std::llround(got * mib), (long long)want) << seqs << " x " << len;
    EXPECT_LE(got * mib, want + 2) << seqs << " x " << len;
  }
  EXPECT_LT(probe.byte_model().sequence_bytes_bound(512), probe.byte_model().sequence_bytes_bound(4096));
  KvCacheOptions given = o;
  given.budget_mib = 7.5;
  EXPECT_EQ(run_budget_mib(given, kDims, 1, 512), 7.5);
  KvCacheOptions fixed;
  fixed.method = KvMethod::uniform;
  fixed.bits = 3;
  EXPECT_EQ(run_budget_mib(fixed, kDims, 1, 512), 0.0);
  EXPECT_THROW(run_budget_mib(o, kDims, 0, 512), Error);
}

TEST(PagePool, BudgetArithmetic) {
  PagePool p(1000);
  EXPECT_TRUE(p.fits(1000));
  p.charge(600);
  p.hold(300);
  EXPECT_EQ(p.free_bytes(), 100u);
  EXPECT_FALSE(p.fits(101));
  EXPECT_THROW(p.charge(101), Error);
  EXPECT_THROW(p.hold(101), Error);
  p.charge_held(200);
  EXPECT_EQ(p.used(), 800u);
  EXPECT_EQ(p.held(), 100u);
  p.release(500);
  p.unhold(100);
  EXPECT_EQ(p.free_bytes(), 700u);
  EXPECT_EQ(p.peak_used(), 800u);
  EXPECT_THROW(p.release(301), InternalError);
  PagePool unlimited(0);
  EXPECT_TRUE(unlimited.fits(SIZE_MAX / 2));
}

TEST(PagePool, ShrinkOrderLowestCostThenOldest) {
  PagePool p;
  EXPECT_FALSE(p.next_to_shrink().has_value());
  p.set_shrinkable(5, -8);  // the cache's cost without a calibrated plan: -(top bits)
  p.set_shrinkable(2, -4);
  p.set_shrinkable(9, -16);
  p.set_shrinkable(7, -16);
  EXPECT_EQ(*p.next_to_shrink(), 7u);  // cost -16, older than 9
  p.set_shrinkable(7, -8);             // shrunk once: now behind 9 (-16) and 5 (older at -8)
  EXPECT_EQ(*p.next_to_shrink(), 9u);
  p.forget(9);
  EXPECT_EQ(*p.next_to_shrink(), 5u);
  p.forget(5);
  EXPECT_EQ(*p.next_to_shrink(), 7u);
  p.forget(7);
  EXPECT_EQ(*p.next_to_shrink(), 2u);
  EXPECT_EQ(p.shrinkable_pages(), 1u);
  p.set_shrinkable(3, 1e-9);  // fractional costs (sensitivity per byte) order the same way
  p.set_shrinkable(4, 1e-10);
  p.forget(2);
  EXPECT_EQ(*p.next_to_shrink(), 4u);
  EXPECT_THROW(p.set_shrinkable(6, std::nan("")), InternalError);
}

}  // namespace
}  // namespace mpkv

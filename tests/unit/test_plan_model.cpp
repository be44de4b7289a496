// Calibrated KV plans against real (tiny synthetic) models: the new plan fields survive a JSON
// round trip; a plan for another model or a corrupt plan is a clear Error; a plan's smoothing scales
// reach the forward pass of perplexity() (invariant with fp16 pages, changes 2-bit keys).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "eval/perplexity.h"
#include "fixtures/tiny_model.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "test_support.h"
#include "util/error.h"

namespace mpkv {
namespace {

// Smoothing is exact in real arithmetic with fp16 pages; float rounding of q * lambda, k / lambda
// and fp16 storage of k / lambda change the mean NLL by far less than this.
constexpr double kSmoothingInvariantNll = 2e-3;
// With 2-bit keys a lambda of 8 on half the channels moves the quantization grid: the NLL must move
// by more than float noise.
constexpr double kSmoothingVisibleNll = 1e-6;

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    FAIL() << "expected an Error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "message: " << e.what();
  }
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A calibrated-looking plan for `m`: mixed bits, identity, smoothing, solve and provenance.
KvPlan calibrated_plan(const Model& m) {
  const KvDims d = m.config().kv_dims();
  KvComponentPlan c;
  c.quantizer = QuantMethod::uniform;
  c.bits = 4;
  KvPlan p = uniform_kv_plan(d, c, c);
  p.method = KvPlanMethod::ratequant;
  p.window = 4;
  p.sink = 1;
  p.at(0, 1, KvRole::key).bits = 2;
  p.at(d.n_layer - 1, 0, KvRole::value).bits = 8;
  p.model = kv_model_identity(m);
  p.smoothing.assign(d.n_layer, std::vector<float>((size_t)d.n_head_kv * d.head_dim));
  for (int l = 0; l < d.n_layer; ++l)
    for (size_t i = 0; i < p.smoothing[l].size(); ++i) p.smoothing[l][i] = 0.5f + 0.25f * (float)((i / 2 + l) % 7);
  p.solve = {KvPlanMethod::ratequant, 3.0, 3.1, 123456, 120000, 4096, 0.25};
  p.provenance = {"calib.txt", 16, 512, 4.0, true, "report.json"};
  return p;
}

TEST(PlanModel, RoundTripKeepsIdentitySmoothingSolveAndProvenance) {
  auto m = test::load_tiny_model("plan_rt", {});
  const KvPlan p = calibrated_plan(*m);
  const KvPlan q = kv_plan_from_json(kv_plan_to_json(p), m->config().kv_dims(), kv_model_identity(*m));
  EXPECT_EQ(q.model.arch, "llama");
  EXPECT_EQ(q.model.tensor_layout_hash, p.model.tensor_layout_hash);
  EXPECT_NE(q.model.tensor_layout_hash, 0u);
  ASSERT_EQ(q.smoothing.size(), p.smoothing.size());
  for (size_t l = 0; l < p.smoothing.size(); ++l) EXPECT_EQ(q.smoothing[l], p.smoothing[l]) << l;  // exact in JSON
  EXPECT_EQ(solve_method_name(q.solve), "ratequant");
  EXPECT_EQ(q.solve.target_avg_bits, 3.0);
  EXPECT_EQ(q.solve.avg_bits, 3.1);
  EXPECT_EQ(q.solve.budget_bytes, 123456);
  EXPECT_EQ(q.solve.bytes, 120000);
  EXPECT_EQ(q.solve.max_len, 4096);
  EXPECT_EQ(q.solve.objective, 0.25);
  EXPECT_EQ(q.provenance.calib_file, "calib.txt");
  EXPECT_EQ(q.provenance.calib_n, 16);
  EXPECT_EQ(q.provenance.calib_len, 512);
  EXPECT_EQ(q.provenance.pi_scale, 4.0);
  EXPECT_TRUE(q.provenance.smooth);
  EXPECT_EQ(q.provenance.report, "report.json");
  EXPECT_EQ(q.at(0, 1, KvRole::key).bits, 2);
  EXPECT_EQ(q.at(m->config().kv_dims().n_layer - 1, 0, KvRole::value).bits, 8);
  EXPECT_EQ(q.window, 4);
}

TEST(PlanModel, LayoutHashIsFnv1aOverNamesTypesAndDims) {
  // One tensor named "a", type 1, dims {2}: FNV-1a 64 over 'a', 0, int64 1, int64 1, int64 2 (little
  // endian), computed by hand with the offset basis 0xcbf29ce484222325 and prime 0x100000001b3.
  struct T { std::string name; int type; std::vector<int64_t> dims; };
  const std::vector<T> ts{{"a", 1, {2}}};
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char bytes[] = {'a', 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
  for (unsigned char b : bytes) h = (h ^ b) * 0x100000001b3ull;
  EXPECT_EQ(tensor_layout_hash(ts), h);
  EXPECT_NE(tensor_layout_hash(std::vector<T>{{"a", 1, {3}}}), h);
  EXPECT_EQ(parse_layout_hash(format_layout_hash(h)), h);
}

TEST(PlanModel, PlanForAnotherModelIsRejectedBeforeAnyWork) {
  auto a = test::load_tiny_model("plan_model_a", {});
  test::TinyModelSpec other;
  other.d_ffn = 128;  // same KV dims, another tensor layout
  auto b = test::load_tiny_model("plan_model_b", other);
  ASSERT_EQ(a->config().kv_dims().n_layer, b->config().kv_dims().n_layer);
  ASSERT_NE(kv_model_identity(*a).tensor_layout_hash, kv_model_identity(*b).tensor_layout_hash);
  const std::string path = write_file("plan_for_a.json", kv_plan_to_json(calibrated_plan(*a)));
  KvCacheOptions o;
  o.plan_file = path;
  o.model = kv_model_identity(*a);
  EXPECT_NO_THROW(make_kv_cache(o, a->config().kv_dims()));
  o.model = kv_model_identity(*b);
  expect_error([&] { make_kv_cache(o, b->config().kv_dims()); }, "KV plan is for another model");
  // A model with other KV dims: the dims message.
  test::TinyModelSpec wide;
  wide.n_layer = 3;
  auto c = test::load_tiny_model("plan_model_c", wide);
  o.model = {};
  expect_error([&] { make_kv_plan(o, c->config().kv_dims()); }, "KV plan is for a model with 2 layers");
}

TEST(PlanModel, CorruptPlansAreRejectedWithClearMessages) {
  auto m = test::load_tiny_model("plan_corrupt", {});
  const KvDims d = m->config().kv_dims();
  const std::string good = kv_plan_to_json(calibrated_plan(*m));
  expect_error([&] { kv_plan_from_json(good.substr(0, good.size() / 2), d); }, "not valid JSON");
  nlohmann::json j = nlohmann::json::parse(good);
  j["version"] = 2;
  expect_error([&] { kv_plan_from_json(j.dump(), d); }, "unsupported version 2");
  j = nlohmann::json::parse(good);
  j["model"]["tensor_layout_hash"] = "md5:1234";
  expect_error([&] { kv_plan_from_json(j.dump(), d); }, "fnv1a64:");
  j = nlohmann::json::parse(good);
  j["smoothing"]["lambda"][1].erase(0);
  expect_error([&] { kv_plan_from_json(j.dump(), d); }, "smoothing.lambda[1] has");
  j = nlohmann::json::parse(good);
  j["smoothing"]["lambda"][0][3] = -1.0;
  expect_error([&] { kv_plan_from_json(j.dump(), d); }, "finite and > 0");
  j = nlohmann::json::parse(good);
  j["solve"]["avg_bits"] = "three";
  expect_error([&] { kv_plan_from_json(j.dump(), d); }, "'avg_bits' must be a number");
}

double mean_nll_with(const Model& m, const std::vector<int32_t>& tokens, const KvPlan& plan) {
  const std::string path = write_file("plan_nll.json", kv_plan_to_json(plan));
  KvCacheOptions o;
  o.plan_file = path;
  PerplexityOptions po;
  po.n_ctx = 48;
  po.progress = false;
  return perplexity(m, tokens, po, [&] { return make_kv_cache(o, m.config().kv_dims()); }).mean_nll;
}

TEST(PlanModel, SmoothingScalesFromThePlanReachThePerplexityForward) {
  auto m = test::load_tiny_model("plan_smooth", {});
  const KvDims d = m->config().kv_dims();
  std::vector<int32_t> tokens;
  for (int i = 0; i < 96; ++i) tokens.push_back(1 + (i * 37 + i / 5) % 250);
  // Pair-equal lambda (adjacent RoPE pairs of the llama tiny model), far from 1 on half the pairs.
  std::vector<std::vector<float>> lambda(d.n_layer, std::vector<float>((size_t)d.n_head_kv * d.head_dim, 1.0f));
  for (auto& l : lambda)
    for (size_t i = 0; i < l.size(); ++i) l[i] = (i / 2) % 2 ? 8.0f : 1.0f;

  KvComponentPlan f16;
  f16.fp16 = true;
  KvPlan pf = uniform_kv_plan(d, f16, f16);
  pf.window = pf.sink = 0;
  const double f16_plain = mean_nll_with(*m, tokens, pf);
  pf.smoothing = lambda;
  const double f16_smoothed = mean_nll_with(*m, tokens, pf);
  EXPECT_NEAR(f16_smoothed, f16_plain, kSmoothingInvariantNll);

  KvComponentPlan k2;
  k2.bits = 2;
  KvComponentPlan v8;
  v8.bits = 8;
  KvPlan pq = uniform_kv_plan(d, k2, v8);
  pq.window = pq.sink = 0;
  const double q_plain = mean_nll_with(*m, tokens, pq);
  pq.smoothing = lambda;
  const double q_smoothed = mean_nll_with(*m, tokens, pq);
  EXPECT_GT(std::abs(q_smoothed - q_plain), kSmoothingVisibleNll) << "the plan's smoothing did not reach Forward";
}

}  // namespace
}  // namespace mpkv

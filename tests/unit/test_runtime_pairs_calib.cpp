// Sensitivities over what the runtime quantizes (docs/calibration.md "What the runtime quantizes"). The backward's gradients through a
// set of (query, key) pairs (three disjoint ranges per query add up to the full gradient; the full
// causal range is the full gradient), calib::QuantizedPairs against hand-computed ranges of the
// cache's rule, the sensitivity accumulator's use of them, and per-component distortion fits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "calib/activation_backward.h"
#include "calib/distortion_fits.h"
#include "calib/quantized_pairs.h"
#include "calib/sensitivity.h"
#include "fixtures/model_config.h"
#include "fixtures/tiny_model.h"
#include "kvcache/kv_cache_factory.h"
#include "test_support.h"
#include "util/error.h"

namespace mpkv::calib {
namespace {

// Sums of double gradients in a different order: far below this relative to the largest entry.
constexpr double kSumRel = 1e-9;

std::unique_ptr<Model> tiny_llama() {
  test::TinyModelSpec spec;
  spec.arch = "llama";
  spec.seed = 11;
  const std::string path = test::temp_dir() + "/calib_pairs_tiny_llama.gguf";
  test::write_tiny_model(path, spec);
  return Model::load(path);
}

std::vector<int32_t> tokens(int n, int vocab) {
  std::mt19937 rng(5);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)(rng() % vocab);
  return t;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// 150 tokens: two attention blocks of the backward (128 queries each), so block-local column
// ranges are exercised too. Pair ranges are absolute key positions; on a sliding-window layer the
// backward's columns start at the window's first key (key0), so ranges that begin before it must
// be clipped there, and the three ranges still add up to the full gradient.
void expect_disjoint_ranges_add_up(const Model& model) {
  ActivationBackward<double> ab(model);
  const auto toks = tokens(150, model.config().n_vocab);
  const int sink = 3, window = 17;
  const auto qend = [&](int t) { return std::max(sink, t + 1 - window); };
  KvGradients<double> full, a, b, c;
  ab.run(toks, 1.0, full);
  EXPECT_TRUE(full.dk_q.empty());
  ab.set_quantized_pairs([&](int, int t, int& k0, int& k1) { k0 = sink, k1 = qend(t); });
  ab.run(toks, 1.0, a);
  ab.set_quantized_pairs([&](int, int t, int& k0, int& k1) { k0 = 0, k1 = std::min(sink, t + 1); });
  ab.run(toks, 1.0, b);
  ab.set_quantized_pairs([&](int, int t, int& k0, int& k1) { k0 = qend(t), k1 = t + 1; });
  ab.run(toks, 1.0, c);
  for (int l = 0; l < model.config().n_layer; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const double tol_k = kSumRel * max_abs(full.dk[l]), tol_v = kSumRel * max_abs(full.dv[l]);
    for (size_t i = 0; i < full.dk[l].size(); ++i) {
      EXPECT_NEAR(a.dk_q[l][i] + b.dk_q[l][i] + c.dk_q[l][i], full.dk[l][i], tol_k);
      EXPECT_NEAR(a.dv_q[l][i] + b.dv_q[l][i] + c.dv_q[l][i], full.dv[l][i], tol_v);
    }
    // The masks change nothing else (up to the order in which the dynamically scheduled attention
    // tasks add their per-thread sums, which varies from run to run under load), and the
    // quantized part is neither zero nor everything.
    for (size_t i = 0; i < full.dk[l].size(); ++i) EXPECT_NEAR(a.dk[l][i], full.dk[l][i], tol_k);
    EXPECT_GT(max_abs(a.dk_q[l]), 0.0);
    EXPECT_GT(max_abs(c.dv_q[l]), 0.0);
    // Keys of the sink and of the last `window` positions are never quantized: zero gradient.
    const size_t kvd = model.config().kv_dim();
    for (int t : {0, sink - 1, 149 - window + 1, 149})
      for (size_t j = 0; j < kvd; ++j) EXPECT_EQ(a.dk_q[l][(size_t)t * kvd + j], 0.0);
  }
}

TEST(QuantizedPairGradients, DisjointRangesAddUpToTheFullGradient) { expect_disjoint_ranges_add_up(*tiny_llama()); }

// Gemma 3 shape: five sliding-window layers (window 40 < 150 tokens, so most queries' first key is
// past the sink) and one global layer.
TEST(QuantizedPairGradients, DisjointRangesAddUpOnSlidingWindowLayers) {
  auto model = test::load_tiny_model("calib_pairs_tiny_gemma3", test::tiny_gemma3_spec(40));
  expect_disjoint_ranges_add_up(*model);
}

TEST(QuantizedPairs, FollowTheCacheRuleForSinkWindowAndTokenGroups) {
  const KvDims dims{2, 4, 2, 64};
  KvCacheOptions o;
  o.method = KvMethod::uniform;
  o.bits = 2;
  o.sink = 1;
  o.window = 4;
  const QuantizedPairs u(make_kv_plan(o, dims));
  int k0 = 0, k1 = 0;
  u.keys(0, 10, k0, k1);  // n = 11: body 10, window 4 -> 6 tokens in pages
  EXPECT_EQ(k0, 1);
  EXPECT_EQ(k1, 7);
  u.keys(1, 3, k0, k1);  // n = 4: everything is sink or window
  EXPECT_EQ(k1 - k0, 0);
  o.method = KvMethod::kivi;  // key groups of 32 tokens: pages grow a whole group at a time
  const QuantizedPairs kv(make_kv_plan(o, dims));
  kv.keys(0, 40, k0, k1);  // body 40, 36 past the window -> one group of 32
  EXPECT_EQ(k1 - k0, 32);
  kv.keys(0, 30, k0, k1);
  EXPECT_EQ(k1 - k0, 0);
}

KvGradients<float> random_grads(const ModelConfig& c, int T, uint64_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  KvGradients<float> g;
  g.n_tokens = T;
  for (auto* a : {&g.k, &g.v, &g.dk, &g.dv}) {
    a->assign(c.n_layer, std::vector<float>((size_t)T * c.kv_dim()));
    for (auto& row : *a)
      for (auto& x : row) x = nd(rng);
  }
  return g;
}

// With quantized-pair gradients the accumulator uses them (zero there: zero sensitivity and
// weight); positions before first_quantized are left out.
TEST(SensitivityOverRuntimePairs, UsesPairGradientsAndSkipsTheSink) {
  const ModelConfig c = test::gqa2_config(1, 1, 8);
  SensitivityOptions o;
  o.key.head_dim = o.value.head_dim = 8;
  o.bits = {2};
  KvGradients<float> g = random_grads(c, 16, 4);
  g.dk_q.assign(1, std::vector<float>(g.dk[0].size(), 0.0f));
  g.dv_q = g.dk_q;
  SensitivityAccumulator zero(c, o);
  zero.add(g);
  EXPECT_EQ(zero.report().pmkvq_key[0][0][0], 0.0);
  EXPECT_EQ(zero.report().w_value[0][0], 0.0);
  EXPECT_TRUE(zero.report().quantized_pairs);
  // Gradient only on row 0 (the sink): counted without a sink, not with one.
  KvGradients<float> h = random_grads(c, 16, 5);
  for (auto* a : {&h.dk, &h.dv})
    for (size_t i = 8; i < (*a)[0].size(); ++i) (*a)[0][i] = 0;
  SensitivityAccumulator all(c, o);
  all.add(h);
  EXPECT_GT(all.report().pmkvq_value[0][0][0], 0.0);
  o.first_quantized = 1;
  SensitivityAccumulator skip(c, o);
  skip.add(h);
  EXPECT_EQ(skip.report().pmkvq_value[0][0][0], 0.0);
  EXPECT_EQ(skip.report().pmkvq_key[0][0][0], 0.0);
}

// Gaussian keys: MSE falls ~4x per bit, so every per-component fit has beta near 4 and a high R^2;
// a dead (all-zero) head takes the pooled fit.
TEST(ComponentFits, PerComponentFitsWithR2AndPooledFallback) {
  KvSamples kv;
  kv.n_layer = 2;
  kv.n_head_kv = 2;
  kv.head_dim = 16;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> x(256 * 16);
    for (auto& v : x) v = (i + 1) * nd(rng);
    kv.keys.push_back(x);
    kv.values.push_back(i == 3 ? std::vector<float>(256 * 16, 0.0f) : x);
  }
  const std::vector<int> bits = supported_distortion_bits(QuantMethod::uniform);
  EXPECT_EQ(bits, (std::vector<int>{1, 2, 3, 4, 8}));
  EXPECT_EQ(supported_distortion_bits(QuantMethod::turbo), (std::vector<int>{1, 2, 3, 4}));
  const ComponentFits f = fit_components(kv, QuantMethod::uniform, {2, 3, 4, 8});
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) {
      EXPECT_GT(f.key[l][h].beta, 3.0);
      EXPECT_LT(f.key[l][h].beta, 5.5);
      EXPECT_GT(f.key[l][h].r2, 0.98);
    }
  // Scale 2 vs scale 1: alpha (D at 0 bits) grows ~4x.
  EXPECT_NEAR(f.key[0][1].alpha / f.key[0][0].alpha, 4.0, 0.6);
  EXPECT_EQ(f.value[1][1].alpha, f.pooled_value.alpha);  // the dead head
  EXPECT_GT(f.min_r2(), 0.98);
  nlohmann::json j = f;
  const ComponentFits back = j.get<ComponentFits>();
  EXPECT_EQ(back.bits, f.bits);
  EXPECT_DOUBLE_EQ(back.key[1][0].beta, f.key[1][0].beta);
  EXPECT_THROW(fit_components(kv, QuantMethod::uniform, {2}), Error);
  EXPECT_THROW(fit_components(kv, QuantMethod::uniform, {2, 5}), Error);
}

}  // namespace
}  // namespace mpkv::calib

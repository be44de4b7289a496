// The calibration backward pass (dL/dK post-RoPE, dL/dV) against central finite differences of its
// own forward with one cached K/V entry moved, on tiny synthetic models of each architecture (in
// double, every coordinate) and on SmolLM2 (a few coordinates); its float path against its double
// path; and its loss against the NLL of the engine's Forward::run logits (which
// test_forward_reference checks against a double-precision reference written from the architecture
// definitions). The gemma3 model has sliding-window layers shorter than every sequence, post-norms,
// GeGLU and a softcap, so dropping any of them from the backward breaks the finite differences, and
// dropping them from the forward breaks the engine comparison. A 62-layer tiny gemma3 has a query
// scale != 1 (BackwardQueryScale); for it and every architecture, the K and V of every layer that
// the backward's forward sweep recomputes match the engine's (BackwardRecomputesEngine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

#include "calib/activation_backward.h"
#include "fixtures/tiny_model.h"
#include "kvcache/f16_kv_cache.h"
#include "model/forward.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {
namespace {

using calib::ActivationBackward;
using calib::KvGradients;
using calib::KvPerturbation;

// Central differences in double with step h: truncation ~h^2 * f''' (f''' = O(1) on these models)
// plus rounding ~1e-16 * |L| / h, both below 1e-9 at h = 1e-4; we allow 1e-6 of the array's largest
// gradient so the bound is about the backward's algebra, not the step.
constexpr double kFdStep = 1e-4;
constexpr double kFdDoubleRel = 1e-6;
// Float backward vs double backward, normwise per layer: fp32 rounding (~1e-7 per op) amplified by
// softmax/normalisation Jacobians through a few layers stays far below this.
constexpr double kFloatVsDoubleRel = 1e-3;
// Engine forward vs this forward: the engine stores K/V in fp16 (relative 2^-11 per entry), its
// RoPE angles are in float, and its linear layers quantize activations to 8 bits per block of 32
// (docs/numerics.md). Relative to the mean NLL (~44 on the random tiny models) the loss moved by
// at most 9e-4 (measured); a shifted position or a dropped layer moves it by whole nats.
constexpr double kEngineLossRel = 2e-3;

// gemma3: the tiny model of test_forward_reference with a window of 4 positions (shorter than every
// sequence below). A name with '_' is a variant of test::tiny_variant_spec (llama_yarn: YaRN's mixed
// angles and cos / sin scale, whose transpose the backward applies).
std::unique_ptr<Model> tiny(const std::string& arch, uint64_t seed = 7) {
  test::TinyModelSpec spec = arch == "gemma3"                        ? test::tiny_gemma3_spec(4)
                             : arch.find('_') != std::string::npos ? test::tiny_variant_spec(arch)
                                                                     : test::TinyModelSpec{};
  spec.arch = arch.substr(0, arch.find('_'));
  spec.seed = seed;
  const std::string path = test::temp_dir() + "/calib_tiny_" + arch + ".gguf";
  test::write_tiny_model(path, spec);
  return Model::load(path, spec.run_n_ctx);  // longrope variants: the context that picks their factors
}

std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)(rng() % vocab);
  return t;
}

double fd_gradient(ActivationBackward<double>& ab, const std::vector<int32_t>& toks, double s, int layer, KvRole role,
                   size_t index, double h) {
  KvPerturbation p{layer, role, index, +h};
  const double up = ab.loss(toks, s, &p);
  p.delta = -h;
  const double down = ab.loss(toks, s, &p);
  return (up - down) / (2 * h);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

class BackwardTiny : public ::testing::TestWithParam<std::string> {};

// Every K and V coordinate of every layer of a 2-layer model, at a non-trivial position scale.
TEST_P(BackwardTiny, MatchesFiniteDifferencesEverywhere) {
  auto model = tiny(GetParam());
  const ModelConfig& c = model->config();
  ActivationBackward<double> ab(*model);
  const auto toks = random_tokens(9, c.n_vocab, 3);
  const double s = 1.5;
  KvGradients<double> g;
  ab.run(toks, s, g);
  ASSERT_EQ((int)g.dk.size(), c.n_layer);
  EXPECT_NEAR(g.loss, ab.loss(toks, s), 1e-12);
  for (int l = 0; l < c.n_layer; ++l) {
    for (KvRole role : {KvRole::key, KvRole::value}) {
      const auto& an = role == KvRole::key ? g.dk[l] : g.dv[l];
      ASSERT_EQ(an.size(), toks.size() * c.kv_dim());
      const double scale = max_abs(an);
      ASSERT_GT(scale, 1e-6) << "gradient vanishes: the check would be empty";
      for (size_t i = 0; i < an.size(); ++i) {
        const double fd = fd_gradient(ab, toks, s, l, role, i, kFdStep);
        ASSERT_NEAR(an[i], fd, kFdDoubleRel * scale)
            << "layer " << l << " " << role_name(role) << " index " << i << " (token " << i / c.kv_dim() << ")";
      }
      // The last token's K/V only feed the last position's logits, which predict nothing.
      for (int j = 0; j < c.kv_dim(); ++j) EXPECT_EQ(an[(toks.size() - 1) * c.kv_dim() + j], 0.0);
    }
  }
}

// dK / dV of `layers` for toks at position scale s against central differences in double, at
// n_samples coordinates per (layer, K|V): pick(trial, size) chooses each index.
void expect_fd_at_samples(const Model& model, const std::vector<int32_t>& toks, double s, const std::vector<int>& layers,
                          int n_samples, const std::function<size_t(int trial, size_t size)>& pick) {
  ActivationBackward<double> ab(model);
  KvGradients<double> g;
  ab.run(toks, s, g);
  for (int l : layers) {
    for (KvRole role : {KvRole::key, KvRole::value}) {
      const auto& an = role == KvRole::key ? g.dk[l] : g.dv[l];
      const double scale = max_abs(an);
      ASSERT_GT(scale, 1e-6) << "gradient vanishes: the check would be empty";
      for (int trial = 0; trial < n_samples; ++trial) {
        const size_t i = pick(trial, an.size());
        ASSERT_NEAR(an[i], fd_gradient(ab, toks, s, l, role, i, kFdStep), kFdDoubleRel * scale)
            << "layer " << l << " " << role_name(role) << " index " << i;
      }
    }
  }
}

std::vector<int> all_layers(const ModelConfig& c) {
  std::vector<int> l(c.n_layer);
  for (int i = 0; i < c.n_layer; ++i) l[i] = i;
  return l;
}

// A sequence longer than several attention blocks (128 queries each): keys of early tokens get
// gradient from every block, summed across threads. Sampled coordinates, early tokens included.
TEST_P(BackwardTiny, MatchesFiniteDifferencesAcrossAttentionBlocks) {
  auto model = tiny(GetParam());
  const ModelConfig& c = model->config();
  std::mt19937 rng(2);
  expect_fd_at_samples(*model, random_tokens(300, c.n_vocab, 13), 1.0, all_layers(c), 12, [&](int trial, size_t size) {
    return trial < 4 ? rng() % (4 * c.kv_dim()) : rng() % size;
  });
}

TEST_P(BackwardTiny, FloatPathMatchesDoublePath) {
  auto model = tiny(GetParam());
  const ModelConfig& c = model->config();
  ActivationBackward<double> ad(*model);
  ActivationBackward<float> af(*model);
  const auto toks = random_tokens(200, c.n_vocab, 5);
  KvGradients<double> gd;
  KvGradients<float> gf;
  ad.run(toks, 1.0, gd);
  af.run(toks, 1.0, gf);
  EXPECT_NEAR(gf.loss, gd.loss, kFloatVsDoubleRel * gd.loss);
  for (int l = 0; l < c.n_layer; ++l) {
    for (int which = 0; which < 4; ++which) {
      const auto& a = which == 0 ? gd.dk[l] : which == 1 ? gd.dv[l] : which == 2 ? gd.k[l] : gd.v[l];
      const auto& b = which == 0 ? gf.dk[l] : which == 1 ? gf.dv[l] : which == 2 ? gf.k[l] : gf.v[l];
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += a[i] * a[i];
      EXPECT_LT(std::sqrt(num / den), kFloatVsDoubleRel) << "layer " << l << " array " << which;
    }
  }
}

// Mean next-token NLL of the engine's own logits (prefill into an fp16 cache of these dims).
double engine_nll(const Model& model, const KvDims& dims, const std::vector<int32_t>& toks, double pos_scale) {
  const ModelConfig& c = model.config();
  Forward fwd(model);
  fwd.set_pos_scale((float)pos_scale);
  F16KvCache cache(dims);
  std::vector<BatchToken> batch;
  for (size_t t = 0; t < toks.size(); ++t) batch.push_back({toks[t], (int)t, 0, true});
  std::vector<float> logits;
  fwd.run(cache, batch, logits);
  double nll = 0;
  for (size_t t = 0; t + 1 < toks.size(); ++t) {
    const float* row = logits.data() + t * c.n_vocab;
    double m = row[0], z = 0;
    for (int j = 1; j < c.n_vocab; ++j) m = std::max(m, (double)row[j]);
    for (int j = 0; j < c.n_vocab; ++j) z += std::exp(row[j] - m);
    nll += m + std::log(z) - row[toks[t + 1]];
  }
  return nll / (double)(toks.size() - 1);
}

// The loss equals the mean NLL of the engine's own logits (prefill, fp16 cache with the model's
// sliding windows), also with positional interpolation (both multiply positions by s).
TEST_P(BackwardTiny, LossMatchesEngineForward) {
  auto model = tiny(GetParam());
  const ModelConfig& c = model->config();
  ActivationBackward<double> ab(*model);
  const auto toks = random_tokens(40, c.n_vocab, 11);
  for (double s : {1.0, 4.0}) {
    const double nll = engine_nll(*model, c.kv_dims(), toks, s);
    EXPECT_NEAR(ab.loss(toks, s), nll, kEngineLossRel * std::abs(nll)) << "pos_scale " << s;
    if (c.kv_dims().window.empty()) continue;
    // The comparison can fail on the windows: the engine without them is well outside the bound
    // (measured: it moves the loss by 1.1% and 1.8% at s = 1 and 4; the two forwards agree to 0.03%).
    KvDims global = c.kv_dims();
    global.window.clear();
    EXPECT_GT(std::abs(ab.loss(toks, s) - engine_nll(*model, global, toks, s)), 4 * kEngineLossRel * std::abs(nll))
        << "pos_scale " << s;
  }
}

// phi3 differs from llama in its NEOX pairs (qwen2 covers them) and split weight views (checked by
// BackwardRecomputesEngine below), so only YaRN adds a backward path here.
INSTANTIATE_TEST_SUITE_P(Archs, BackwardTiny, ::testing::Values("llama", "qwen2", "qwen3", "gemma3", "llama_yarn"));

// gemma3 with a query scale != 1: model_config.cpp sets it for the 62-layer (27B) shape, to
// sqrt(head_dim / (d_model / n_head)) = sqrt(32 / 16) on the tiny gemma3 (window 4 as above).
std::unique_ptr<Model> tiny_query_scaled() {
  test::TinyModelSpec spec = test::tiny_gemma3_spec(4);
  spec.n_layer = 62;
  spec.seed = 7;
  auto model = test::load_tiny_model("calib_tiny_gemma3_query_scale", spec);
  EXPECT_NEAR(model->config().query_scale, std::sqrt(2.0), 1e-6);
  return model;
}

// The query scale multiplies every score: a backward that dropped its factor on dq (or applied it
// in only one of the forward and the backward) fails the finite differences; one that dropped it
// from both stays self-consistent and fails BackwardRecomputesEngine instead.
// Sampled coordinates of a sliding-window layer (0), a global one (5), a middle and the last layer.
TEST(BackwardQueryScale, MatchesFiniteDifferences) {
  auto model = tiny_query_scaled();
  const ModelConfig& c = model->config();
  const auto toks = random_tokens(12, c.n_vocab, 3);
  std::mt19937 rng(5);
  // The last token's K/V get no gradient (see above): sample the others.
  expect_fd_at_samples(*model, toks, 1.5, {0, 5, 30, c.n_layer - 1}, 16,
                       [&](int, size_t) { return rng() % ((toks.size() - 1) * c.kv_dim()); });
}

// Every layer's post-RoPE K and V as a forward pass computes them, [n_layer][T * kv_dim].
struct LayerKv {
  std::vector<std::vector<double>> k, v;
  explicit LayerKv(int n_layer) : k(n_layer), v(n_layer) {}
  template <typename T>
  void keep(int l, size_t n, const T* kp, const T* vp) {
    k[l].assign(kp, kp + n);
    v[l].assign(vp, vp + n);
  }
};

// The engine's K and V for a prefill of toks (Forward's KV observer, before the fp16 cache).
LayerKv engine_kv(const Model& model, const std::vector<int32_t>& toks) {
  const ModelConfig& c = model.config();
  LayerKv kv(c.n_layer);
  Forward fwd(model);
  fwd.set_kv_observer([&](int l, int n, const float* k, const float* v) { kv.keep(l, (size_t)n * c.kv_dim(), k, v); });
  F16KvCache cache(c.kv_dims());
  std::vector<BatchToken> batch;
  for (size_t t = 0; t < toks.size(); ++t) batch.push_back({toks[t], (int)t, 0, true});
  std::vector<float> logits;
  fwd.run(cache, batch, logits);
  return kv;
}

// ||a - b|| / ||b|| over one array.
double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num / den);
}

// The backward's forward sweep is a second copy of the model definition; this holds it to the
// engine's (model/forward.cpp): every layer's K and V, which depend on everything every earlier
// layer computes (norms, projections, biases, QK norm, RoPE, attention with its windows and query
// scale, post-norms, the FFN), and, through the loss, the last layer, the final norm, the head and
// the softcap. The engine has no float reference path (test_forward_reference keeps its double
// reference to itself), so the comparison is with the engine as it runs: its linear layers quantize
// activations to 8 bits per block of 32 (~0.4% per dot product, docs/numerics.md) and its RoPE
// angles are float; the backward here runs in double. Measured, normwise per layer: <= 9.3e-3 on the
// 2- and 6-layer models, growing with depth to 1.6e-2 at layer 60 of the 62-layer one; with the
// query scale dropped from the backward's forward, that model's K/V differ by 3.6e-2 at layer 4 and
// 0.17 at layer 61 (its loss moves only 0.16%, inside kEngineLossRel: the K/V catch it).
constexpr double kEngineKvRel = 3e-2;

class BackwardRecomputesEngine : public ::testing::TestWithParam<std::string> {};

// llama with a rope_freqs.weight far from 1 (the factors of test_forward_reference): dropping them
// from the backward's RoPE (rope_rotate) moves the keys by 0.71 normwise (measured), 24x kEngineKvRel.
std::unique_ptr<Model> tiny_rope_freqs() {
  test::TinyModelSpec spec;
  spec.seed = 7;
  spec.rope_freqs = {1.0f, 1.5f, 2.5f, 0.7f, 4.0f, 8.0f, 3.0f, 1.25f};
  const std::string path = test::temp_dir() + "/calib_tiny_llama_rope_freqs.gguf";
  test::write_tiny_model(path, spec);
  return Model::load(path);
}

TEST_P(BackwardRecomputesEngine, KeysValuesAndLossMatchTheEngine) {
  auto model = GetParam() == "gemma3_query_scale" ? tiny_query_scaled()
               : GetParam() == "llama_rope_freqs" ? tiny_rope_freqs()
                                                  : tiny(GetParam());
  const ModelConfig& c = model->config();
  const auto toks = random_tokens(40, c.n_vocab, 11);
  const LayerKv engine = engine_kv(*model, toks);
  LayerKv mine(c.n_layer);
  ActivationBackward<double> ab(*model);
  const double loss = ab.loss(toks, 1.0, nullptr, [&](int l, int T, const double*, const double* k, const double* v) {
    mine.keep(l, (size_t)T * c.kv_dim(), k, v);
  });
  double worst = 0;
  for (int l = 0; l < c.n_layer; ++l) {
    ASSERT_EQ(mine.k[l].size(), engine.k[l].size());
    const double dk = rel_diff(mine.k[l], engine.k[l]), dv = rel_diff(mine.v[l], engine.v[l]);
    worst = std::max({worst, dk, dv});
    EXPECT_LT(dk, kEngineKvRel) << "layer " << l << " keys";
    EXPECT_LT(dv, kEngineKvRel) << "layer " << l << " values";
  }
  const double nll = engine_nll(*model, c.kv_dims(), toks, 1.0);
  EXPECT_NEAR(loss, nll, kEngineLossRel * std::abs(nll));
  std::printf("%s: largest per-layer K/V difference %.2e, loss %.6f vs engine %.6f\n", GetParam().c_str(), worst,
              loss, nll);
}

INSTANTIATE_TEST_SUITE_P(Archs, BackwardRecomputesEngine,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3", "gemma3_query_scale",
                                           "llama_rope_freqs", "llama_yarn", "phi3", "phi3_longrope_short",
                                           "phi3_longrope_long"));

TEST(BackwardErrors, RejectsBadInput) {
  auto model = tiny("llama");
  ActivationBackward<float> ab(*model);
  EXPECT_THROW(ab.loss({1}, 1.0), Error);
  EXPECT_THROW(ab.loss({1, 100000}, 1.0), Error);
  EXPECT_THROW(ab.loss({1, 2}, 0.0), Error);
  KvPerturbation p{5, KvRole::key, 0, 1.0};
  EXPECT_THROW(ab.loss({1, 2}, 1.0, &p), Error);
}

// SmolLM2 on 64 real tokens: the float backward against double central differences at the
// largest-gradient coordinate and two random ones, for K and V of three layers.
// Float analytic vs double FD: the float path's own error (normwise ~1e-4 here) dominates.
constexpr double kSmolFloatVsFdRel = 2e-2;
constexpr double kSmolFdStep = 1e-3;  // keys/values are O(1..10); the loss is smooth at this scale

// The first n tokens of WikiText-2 test for a real model; empty when the text is absent.
std::vector<int32_t> wikitext_tokens(const Model& model, size_t n, bool add_bos) {
  std::ifstream f(test::source_path("../shared/data/wikitext-2/test.txt"));
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  auto toks = Tokenizer::from_gguf(model.gguf()).encode(ss.str().substr(0, 4000), add_bos);
  if (toks.size() > n) toks.resize(n);
  return toks;
}

// The float backward's dK / dV against double central differences, for K and V of each layer, at
// the largest-gradient coordinate and n_random random ones (the last token's gradient is 0).
void expect_sampled_fd(const Model& model, const KvGradients<float>& gf, const std::vector<int32_t>& toks,
                       const std::vector<int>& layers, int n_random, uint32_t seed) {
  const ModelConfig& c = model.config();
  ActivationBackward<double> ad(model);
  EXPECT_NEAR(ad.loss(toks, 1.0), gf.loss, 1e-3 * gf.loss);
  std::mt19937 rng(seed);
  for (int l : layers) {
    for (KvRole role : {KvRole::key, KvRole::value}) {
      const auto& an = role == KvRole::key ? gf.dk[l] : gf.dv[l];
      size_t top = 0;
      double scale = 0;
      for (size_t i = 0; i < an.size(); ++i)
        if (std::fabs(an[i]) > scale) scale = std::fabs(an[i]), top = i;
      ASSERT_GT(scale, 0.0);
      const size_t n_valid = (toks.size() - 1) * c.kv_dim();
      std::vector<size_t> at{top};
      for (int r = 0; r < n_random; ++r) at.push_back(rng() % n_valid);
      for (size_t i : at) {
        const double fd = fd_gradient(ad, toks, 1.0, l, role, i, kSmolFdStep);
        EXPECT_NEAR(an[i], fd, kSmolFloatVsFdRel * scale)
            << "layer " << l << " " << role_name(role) << " index " << i << " (largest " << scale << ")";
      }
    }
  }
}

// The float pass over real text; its mean NLL must look like a language model's.
KvGradients<float> real_text_gradients(const Model& model, const std::vector<int32_t>& toks) {
  KvGradients<float> gf;
  ActivationBackward<float>(model).run(toks, 1.0, gf);
  EXPECT_GT(gf.loss, 0.5);
  EXPECT_LT(gf.loss, 8.0);
  return gf;
}

TEST(BackwardSmolLM2, MatchesFiniteDifferencesAtSampledCoordinates) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 model not found (set MPKV_MODEL)";
  auto model = Model::load(path);
  const ModelConfig& c = model->config();
  const auto toks = wikitext_tokens(*model, 64, false);
  if (toks.empty()) GTEST_SKIP() << "WikiText-2 not found";
  ASSERT_EQ(toks.size(), 64u);

  const KvGradients<float> gf = real_text_gradients(*model, toks);
  expect_sampled_fd(*model, gf, toks, {0, c.n_layer / 2, c.n_layer - 1}, 2, 1);
}

// Gemma 3 270M on 64 real tokens: the float loss against the engine's NLL (the engine quantizes
// activations to 8 bits and stores K/V in fp16; observed within 0.3% of the loss), and the float
// backward against double central differences at the largest-gradient coordinate and a random one,
// for K and V of a sliding-window layer (0) and a global one (5).
constexpr double kGemmaEngineLossRel = 1e-2;

TEST(BackwardGemma3, RealModelMatchesEngineAndFiniteDifferences) {
  const std::string path = test::gemma_model_path();
  if (path.empty()) GTEST_SKIP() << test::kGemmaModelAbsent;
  auto model = Model::load(path);
  const ModelConfig& c = model->config();
  ASSERT_FALSE(c.kv_dims().window.empty());
  ASSERT_GT(c.attn(0).window, 0);
  ASSERT_EQ(c.attn(5).window, 0);
  const auto toks = wikitext_tokens(*model, 64, true);
  if (toks.empty()) GTEST_SKIP() << "WikiText-2 not found";
  ASSERT_EQ(toks.size(), 64u);

  const KvGradients<float> gf = real_text_gradients(*model, toks);
  EXPECT_NEAR(gf.loss, engine_nll(*model, c.kv_dims(), toks, 1.0), kGemmaEngineLossRel * gf.loss);
  expect_sampled_fd(*model, gf, toks, {0, 5}, 1, 4);
}

}  // namespace
}  // namespace mpkv

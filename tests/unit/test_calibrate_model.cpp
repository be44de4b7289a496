// The calibration driver on a tiny model (report shape, key maxima against the engine's forward),
// and positional interpolation on SmolLM2: key maxima from 512 tokens at s = 4 are closer to those
// of 2048 real tokens than at s = 1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "calib/calibrate.h"
#include "fixtures/tiny_model.h"
#include "kvcache/f16_kv_cache.h"
#include "model/forward.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::calib {
namespace {

// Key maxima of this pass (float activations) vs the engine's observer: the engine's linear layers
// quantize activations to 8 bits per block of 32 (q8, docs/numerics.md), which moves a projection
// by up to ~0.5% of its size (measured: 0.36% on the tiny models); a wrong layer, head or position
// moves maxima by tens of percent.
constexpr double kKeyMaxRel = 1e-2;

std::unique_ptr<Model> tiny(const std::string& arch) {
  test::TinyModelSpec spec;
  spec.arch = arch;
  const std::string path = test::temp_dir() + "/calibrate_tiny_" + arch + ".gguf";
  test::write_tiny_model(path, spec);
  return Model::load(path);
}

CalibrationData random_data(int n, int len, double pi, int vocab) {
  std::mt19937 rng(17);
  CalibrationData d;
  d.options.n_samples = n;
  d.options.sample_len = len;
  d.options.pi_scale = pi;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> w(len);
    for (auto& t : w) t = (int32_t)(rng() % vocab);
    d.samples.push_back(w);
  }
  d.text_tokens = (size_t)n * len;
  return d;
}

class CalibrateTiny : public ::testing::TestWithParam<std::string> {};

TEST_P(CalibrateTiny, ReportIsCompleteAndKeyMaximaMatchTheEngine) {
  auto model = tiny(GetParam());
  const ModelConfig& c = model->config();
  const CalibrationData data = random_data(3, 64, 2.0, c.n_vocab);
  CalibrationOptions o;
  o.sensitivity.bits = {2, 4};
  o.alpha_samples = 2;
  o.progress = false;
  const CalibrationReport r = run_calibration(*model, data, o);

  ASSERT_EQ((int)r.smoothing.lambda.size(), c.n_layer);
  ASSERT_EQ((int)r.alpha_search.size(), c.n_layer);
  const auto grid = default_alpha_grid();
  for (int l = 0; l < c.n_layer; ++l) {
    EXPECT_NE(std::find(grid.begin(), grid.end(), r.smoothing.alpha[l]), grid.end());
    const auto& lam = r.smoothing.lambda[l];
    ASSERT_EQ((int)lam.size(), c.kv_dim());
    for (int h = 0; h < c.n_head_kv; ++h)
      for (int j = 0; j < c.head_dim / 2; ++j) {
        const int a = h * c.head_dim + (c.rope_style == RopeStyle::adjacent ? 2 * j : j);
        const int b = h * c.head_dim + (c.rope_style == RopeStyle::adjacent ? 2 * j + 1 : j + c.head_dim / 2);
        EXPECT_GT(lam[a], 0.0f);
        EXPECT_EQ(lam[a], lam[b]) << "a RoPE pair must share lambda";
      }
  }
  EXPECT_TRUE(std::isfinite(r.mean_loss));
  EXPECT_GT(r.mean_loss, 0.0);
  EXPECT_EQ(r.sensitivity.n_samples, 3);
  EXPECT_TRUE(r.sensitivity.smoothed);
  for (int l = 0; l < c.n_layer; ++l)
    for (int h = 0; h < c.n_head_kv; ++h) {
      EXPECT_GT(r.sensitivity.w_key[l][h], 0.0);
      EXPECT_GT(r.sensitivity.w_value[l][h], 0.0);
      EXPECT_GT(r.sensitivity.pmkvq_key[l][h][0], r.sensitivity.pmkvq_key[l][h][1]);  // 2 bits worse than 4
    }
  EXPECT_GE(r.timings.total_s, r.timings.key_maxima_s + r.timings.alpha_search_s + r.timings.gradients_s);
  EXPECT_GT(r.timings.gradients_s, 0.0);
  const nlohmann::json j = r;
  for (const char* key : {"model", "data", "mean_loss", "smoothing", "alpha_search", "sensitivity", "timings"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["data"]["pi_scale"].get<double>(), 2.0);

  // The key maxima are those the engine's forward shows its observer at positions t * 2.
  KeyMaxima ref = KeyMaxima::for_model(c);
  for (const auto& w : data.samples) {
    Forward fwd(*model);
    fwd.set_pos_scale(2.0f);
    fwd.set_kv_observer([&](int layer, int n, const float* k, const float*) { ref.observe(layer, n, k); });
    F16KvCache cache({c.n_layer, c.n_head, c.n_head_kv, c.head_dim});
    std::vector<BatchToken> batch;
    for (size_t t = 0; t < w.size(); ++t) batch.push_back({w[t], (int)t, 0, false});
    std::vector<float> logits;
    fwd.run(cache, batch, logits);
  }
  for (int l = 0; l < c.n_layer; ++l)
    for (int i = 0; i < c.kv_dim(); ++i)
      EXPECT_NEAR(r.key_maxima.max_abs[l][i], ref.max_abs[l][i], kKeyMaxRel * ref.max_abs[l][i]) << l << " " << i;
}

INSTANTIATE_TEST_SUITE_P(Archs, CalibrateTiny, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(CalibrateErrors, RejectsBadOptionsBeforeWork) {
  auto model = tiny("llama");
  CalibrationData data = random_data(1, 16, 1.0, model->config().n_vocab);
  CalibrationOptions o;
  o.progress = false;
  o.sensitivity.bits = {5};
  EXPECT_THROW(run_calibration(*model, data, o), Error);
  o = {};
  o.progress = false;
  o.smoothing.key.bits = 7;
  EXPECT_THROW(run_calibration(*model, data, o), Error);
  o = {};
  o.progress = false;
  o.gradient_pos_scale = 0;
  EXPECT_THROW(run_calibration(*model, data, o), Error);
  o = {};
  data.samples.clear();
  EXPECT_THROW(run_calibration(*model, data, o), Error);
}

// Metric: mean relative error |m_c - m_ref,c| / m_ref,c of the per-channel max |post-RoPE key|
// against m_ref from 2048 real tokens at s = 1, over the chosen layers and RoPE pairs.
double mean_relative_error(const KeyMaxima& a, const KeyMaxima& ref, const std::vector<int>& layers,
                           const std::vector<int>& pairs) {
  double e = 0;
  size_t n = 0;
  for (int l : layers)
    for (int h = 0; h < ref.n_head_kv; ++h)
      for (int j : pairs)
        for (int ch : {2 * j, 2 * j + 1}) {  // SmolLM2 is a llama GGUF: adjacent pairs
          const size_t i = (size_t)h * ref.head_dim + ch;
          e += std::fabs(a.max_abs[l][i] - ref.max_abs[l][i]) / std::max(ref.max_abs[l][i], 1e-6f);
          ++n;
        }
  return e / (double)n;
}

// What positional interpolation is for: RoPE pairs that 512 positions turn by less than a full
// circle but 2048 positions turn by at least a quarter (pair j turns theta_j = base^(-2j/d) per
// position) show only part of their rotation in a short window; at s = 4 the same 512 tokens sweep
// the angles of 2048 positions. In layer 0 the pre-RoPE keys do not depend on position, so there
// the effect is isolated: s = 4 must be closer to the 2048-token maxima on those pairs.
// Over all layers and channels the picture differs on SmolLM2 (measured with 4 windows: mean
// relative error 0.095 at s = 1, 0.164 at s = 4): interpolated positions shift the hidden states of
// later layers and their keys shrink (mean log ratio -0.11 at s = 1, -0.18 at s = 4), in every
// frequency band. The test prints both figures.
TEST(CalibrateSmolLM2, PositionalInterpolationApproachesLongContextKeyMaxima) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 model not found (set MPKV_MODEL)";
  std::ifstream f(test::source_path("../shared/data/wikitext-2/test.txt"));
  if (!f) GTEST_SKIP() << "WikiText-2 not found";
  std::stringstream ss;
  ss << f.rdbuf();
  auto model = Model::load(path);
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.rope_style, RopeStyle::adjacent);
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  CalibrationDataOptions o;
  o.n_samples = 1;
  o.sample_len = 2048;
  const CalibrationData long_data = make_calibration_data(tok, ss.str(), o);
  const std::vector<int32_t> long_w = long_data.samples[0];
  const std::vector<int32_t> short_w(long_w.begin(), long_w.begin() + 512);

  std::vector<int> band, all_pairs, all_layers;
  for (int j = 0; j < c.head_dim / 2; ++j) {
    const double theta = std::pow((double)c.rope_base, -2.0 * j / c.head_dim);
    if (512 * theta < 2 * M_PI && 2048 * theta >= M_PI / 2) band.push_back(j);
    all_pairs.push_back(j);
  }
  for (int l = 0; l < c.n_layer; ++l) all_layers.push_back(l);
  ASSERT_GE(band.size(), 3u);

  ActivationBackward<float> ab(*model);
  const KeyMaxima ref = collect_key_maxima(ab, {long_w}, 1.0);
  const KeyMaxima s1 = collect_key_maxima(ab, {short_w}, 1.0);
  const KeyMaxima s4 = collect_key_maxima(ab, {short_w}, 4.0);
  const double b1 = mean_relative_error(s1, ref, {0}, band), b4 = mean_relative_error(s4, ref, {0}, band);
  std::printf("layer 0, pairs %d..%d: mean relative error of max|K| vs 2048 tokens: s=1 %.4f  s=4 %.4f\n",
              band.front(), band.back(), b1, b4);
  std::printf("all layers and channels:   s=1 %.4f  s=4 %.4f\n", mean_relative_error(s1, ref, all_layers, all_pairs),
              mean_relative_error(s4, ref, all_layers, all_pairs));
  EXPECT_LT(b4, 0.75 * b1);
}

}  // namespace
}  // namespace mpkv::calib

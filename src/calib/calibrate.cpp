#include "calib/calibrate.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <optional>

#include "calib/quantized_pairs.h"
#include "quant/kv_quantizer.h"
#include "util/error.h"
#include "util/progress.h"

namespace mpkv::calib {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

KeyMaxima collect_key_maxima(ActivationBackward<float>& ab, const std::vector<std::vector<int32_t>>& windows,
                             double pos_scale, int keep_samples, std::vector<std::vector<AttentionSample>>* keep,
                             const std::function<void(size_t)>& done) {
  const ModelConfig& c = ab.config();
  KeyMaxima m = KeyMaxima::for_model(c);
  if (keep) keep->assign(c.n_layer, {});
  for (size_t w = 0; w < windows.size(); ++w) {
    const bool keep_this = keep && (int)w < keep_samples;
    ab.observe(windows[w], pos_scale, [&](int layer, int n, const float* q, const float* k, const float* v) {
      m.observe(layer, n, k);
      if (keep_this) {
        AttentionSample s;
        s.n_tokens = n;
        s.q.assign(q, q + (size_t)n * c.q_dim());
        s.k.assign(k, k + (size_t)n * c.kv_dim());
        s.v.assign(v, v + (size_t)n * c.kv_dim());
        (*keep)[layer].push_back(std::move(s));
      }
    });
    if (done) done(w + 1);
  }
  return m;
}

namespace {

// Key maxima over every window (q, k, v of the first alpha_samples kept), then the smoothing alpha
// and lambda of each layer, scored over the quantized pairs when the runtime plan is known.
void smoothing_step(ActivationBackward<float>& ab, const CalibrationData& data, const std::optional<QuantizedPairs>& pairs,
                    CalibrationOptions& o, CalibrationReport& r) {
  const ModelConfig& c = ab.config();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<AttentionSample>> kept;
  {
    ProgressBar bar("calibrate: key maxima", data.samples.size(), o.progress);
    r.key_maxima = collect_key_maxima(ab, data.samples, data.options.pi_scale, o.alpha_samples, &kept,
                                      [&](size_t w) { bar.update(w); });
    bar.finish();
  }
  r.timings.key_maxima_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  r.smoothing.n_layer = c.n_layer;
  r.smoothing.n_head = c.n_head;
  r.smoothing.n_head_kv = c.n_head_kv;
  r.smoothing.head_dim = c.head_dim;
  r.smoothing.rope_style = c.rope_style;
  if (pairs) {
    o.smoothing.quantized_pairs = pairs->range();
    o.smoothing.first_quantized = pairs->sink();
  }
  ProgressBar bar("calibrate: smoothing alpha", c.n_layer, o.progress);
  for (int l = 0; l < c.n_layer; ++l) {
    LayerAlphaSearch s = search_layer_alpha(c, l, kept[l], r.key_maxima.max_abs[l].data(), o.smoothing);
    r.smoothing.alpha.push_back(s.alpha);
    r.smoothing.lambda.push_back(
        pair_lambda(r.key_maxima.max_abs[l].data(), c.n_head_kv, c.head_dim, c.rope_style, s.alpha));
    r.alpha_search.push_back(std::move(s));
    kept[l].clear();
    kept[l].shrink_to_fit();
    bar.update(l + 1);
  }
  bar.finish();
  r.timings.alpha_search_s = seconds_since(t0);
}

// The forward + backward pass over every window, accumulated into the sensitivities (through the
// quantized pairs when the runtime plan is known; of the smoothed keys when smoothing ran).
void gradient_step(ActivationBackward<float>& ab, const CalibrationData& data, const std::optional<QuantizedPairs>& pairs,
                   CalibrationOptions& o, CalibrationReport& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = data.samples.size();
  if (pairs) {
    ab.set_quantized_pairs(pairs->range());
    o.sensitivity.first_quantized = pairs->sink();
  }
  SensitivityAccumulator acc(ab.config(), o.sensitivity, o.smooth ? &r.smoothing : nullptr);
  KvGradients<float> g;
  double loss_sum = 0;
  {
    ProgressBar bar("calibrate: gradients", n, o.progress);
    for (size_t w = 0; w < n; ++w) {
      ab.run(data.samples[w], o.gradient_pos_scale, g);
      acc.add(g);
      loss_sum += g.loss;
      char extra[32];
      std::snprintf(extra, sizeof extra, "loss %.3f", loss_sum / (double)(w + 1));
      bar.update(w + 1, extra);
    }
    bar.finish();
  }
  r.mean_loss = loss_sum / (double)n;
  r.sensitivity = acc.report();
  r.timings.gradients_s = seconds_since(t0);
}

}  // namespace

CalibrationReport run_calibration(const Model& model, const CalibrationData& data, const CalibrationOptions& opts) {
  validate(data.options);
  // The quantizers work on this model's heads whatever head_dim the options were built with.
  CalibrationOptions o = opts;
  for (QuantOptions* q : {&o.sensitivity.key, &o.sensitivity.value, &o.smoothing.key, &o.smoothing.value})
    q->head_dim = model.config().head_dim;
  MPKV_CHECK(!data.samples.empty(), "calibration: no calibration windows");
  MPKV_CHECK(o.alpha_samples >= 1, "calibration: alpha_samples must be at least 1");
  const auto t_start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  const ModelConfig& c = model.config();
  CalibrationReport r;
  r.model_name = c.name;
  r.arch = c.arch_name;
  r.n_layer = c.n_layer;
  r.n_head = c.n_head;
  r.n_head_kv = c.n_head_kv;
  r.head_dim = c.head_dim;
  r.data = data.options;
  r.text_tokens = data.text_tokens;
  r.gradient_pos_scale = o.gradient_pos_scale;
  MPKV_CHECK(std::isfinite(o.gradient_pos_scale) && o.gradient_pos_scale > 0,
             "calibration: the gradient pass's position scale must be > 0");
  // Validate every quantizer before the long work starts.
  SensitivityAccumulator check(c, o.sensitivity);
  (void)check;
  if (o.smooth) {
    KvQuantizer kq(o.smoothing.key), vq(o.smoothing.value);
  }

  const auto t0 = std::chrono::steady_clock::now();
  ActivationBackward<float> ab(model);
  r.timings.weights_s = seconds_since(t0);
  // What the runtime plan's cache quantizes: both the alpha search and the gradients count only that.
  std::optional<QuantizedPairs> pairs;
  if (o.runtime) pairs.emplace(*o.runtime);
  if (o.smooth) smoothing_step(ab, data, pairs, o, r);
  gradient_step(ab, data, pairs, o, r);
  r.timings.total_s = seconds_since(t_start);
  r.timings.cpu_s = (double)(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  return r;
}

void to_json(nlohmann::json& j, const CalibrationTimings& t) {
  j = nlohmann::json{{"weights_s", t.weights_s},
                     {"key_maxima_s", t.key_maxima_s},
                     {"alpha_search_s", t.alpha_search_s},
                     {"gradients_s", t.gradients_s},
                     {"total_s", t.total_s},
                     {"cpu_s", t.cpu_s}};
}

void to_json(nlohmann::json& j, const CalibrationReport& r) {
  j = nlohmann::json{{"model", {{"name", r.model_name},
                                {"arch", r.arch},
                                {"n_layer", r.n_layer},
                                {"n_head", r.n_head},
                                {"n_head_kv", r.n_head_kv},
                                {"head_dim", r.head_dim}}},
                     {"data", r.data},
                     {"text_tokens", r.text_tokens},
                     {"gradient_pos_scale", r.gradient_pos_scale},
                     {"mean_loss", r.mean_loss},
                     {"key_max_abs", r.key_maxima.max_abs},
                     {"alpha_search", r.alpha_search},
                     {"sensitivity", r.sensitivity},
                     {"timings", r.timings}};
  if (!r.smoothing.empty()) j["smoothing"] = r.smoothing;
}

}  // namespace mpkv::calib

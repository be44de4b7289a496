// mpkv distortion: measured distortion curves D(b) of every KV quantizer on the model's real
// post-RoPE keys and values, and the RateQuant fit D(b) = alpha * beta^-b per (quantizer, K|V).
//
// The text is run through the model in windows of --ctx tokens (fresh f16 cache per window) until
// --tokens tokens are seen; calib::collect_kv (the collector calibration uses) keeps keys and
// values per (layer, KV head). Each
// component is measured on its own (MSE for every method at every width in [1, 8] it supports, as
// calibration's fits: quant/distortion.h supported_distortion_bits); the per-(quantizer, K|V)
// curve is the mean MSE over components at each bit-width, fitted by least squares on ln MSE.
//
// --check --report-in R: the prediction check (docs/calibration.md): from a fixed-width plan at
// --check-bits with the report's smoothing, every (layer, KV head, K|V) is dropped alone to
// --check-drop bits; the measured increase of KL(f16 || plan) (eval/single_drop_check.h, quantized
// where the runtime quantizes) is ranked against RateQuant's prediction w * (D(drop) - D(bits))
// from the report's per-component fits, and PM-KVQ's s(drop) - s(bits): Spearman's rho.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "alloc/rate_model.h"
#include "calib/kv_collector.h"
#include "calib_report.h"
#include "eval/single_drop_check.h"
#include "kvcache/kv_cache_factory.h"
#include "cli_util.h"
#include "cli_options.h"
#include "commands.h"
#include "quant/distortion.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/progress.h"

namespace mpkv::cli {

namespace {

struct Args {
  std::string model, file, json, report_in;
  int tokens = 2048, ctx = 512, threads = 0;
  bool check = false;
  int check_bits = 3, check_drop = 2, check_windows = 1, check_stride = 1;
};

// Prediction of one component's drop from `from` to `to` bits by each model.
struct DropPrediction {
  double ratequant = 0;  // w * (D(to) - D(from)), D the component's fit
  double pmkvq = 0;      // s(to) - s(from); NaN when the report lacks either width
};

DropPrediction predict_drop(const calib::CalibrationInputs& in, const DropComponent& d, int from, int to) {
  const bool k = d.role == KvRole::key;
  const ExponentialFit& f = !in.fits.empty() ? (k ? in.fits.key : in.fits.value)[d.layer][d.head]
                                             : (k ? in.fit_k : in.fit_v);
  const DistortionModel m{f.alpha, f.beta};
  DropPrediction p;
  p.ratequant = (k ? in.w_k : in.w_v)[d.layer][d.head] * (distortion(m, to) - distortion(m, from));
  const auto at = [&](int b) {
    const auto it = std::find(in.bits.begin(), in.bits.end(), b);
    return it == in.bits.end() ? NAN : (k ? in.pmkvq_k : in.pmkvq_v)[d.layer][d.head][it - in.bits.begin()];
  };
  p.pmkvq = at(to) - at(from);
  return p;
}

void run_check(const Args& a) {
  MPKV_CHECK(!a.report_in.empty(), "--check needs --report-in (a calibration report from mpkv calibrate)");
  MPKV_CHECK(a.check_drop < a.check_bits, "--check-drop must be below --check-bits");
  apply_threads(a.threads);
  auto model = load_model(a.model, a.ctx);
  const ModelConfig& c = model->config();
  const calib::CalibrationInputs in =
      read_calibration_report(a.report_in, "--report-in " + a.report_in + ": ", c, kv_model_identity(*model));
  KvCacheOptions ko;
  ko.method = parse_kv_method(method_name(in.quantizer));
  ko.bits = a.check_bits;
  KvPlan base = make_kv_plan(ko, c.kv_dims());
  base.smoothing = in.smoothing.lambda;
  std::vector<DropComponent> comps;
  for (int l = 0, i = 0; l < c.n_layer; ++l)
    for (int h = 0; h < c.n_head_kv; ++h)
      for (KvRole role : {KvRole::key, KvRole::value})
        if (i++ % a.check_stride == 0) comps.push_back({l, h, role});
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  const auto ids = tok.encode(read_text_file(a.file), tok.add_bos(), false);
  SingleDropOptions o;
  o.n_ctx = a.ctx;
  o.windows = a.check_windows;
  o.add_bos = tok.add_bos();
  o.bos = tok.bos();
  const SingleDropResult r = measure_single_drops(*model, ids, base, comps, a.check_drop, o);
  std::vector<double> rq, pm, dkl, kl_b;
  bool have_pm = true;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < comps.size(); ++i) {
    const DropPrediction p = predict_drop(in, comps[i], a.check_bits, a.check_drop);
    rq.push_back(p.ratequant);
    pm.push_back(p.pmkvq);
    have_pm &= std::isfinite(p.pmkvq);
    dkl.push_back(r.kl[i] - r.kl_base);
    kl_b.push_back(r.kl_from_base[i]);
    rows.push_back({{"layer", comps[i].layer}, {"head", comps[i].head}, {"role", role_name(comps[i].role)},
                    {"pred_ratequant", p.ratequant}, {"pred_pmkvq", p.pmkvq}, {"dkl", dkl.back()},
                    {"kl_from_base", kl_b.back()}});
  }
  const double rho_rq = spearman(rq, dkl), rho_rq_b = spearman(rq, kl_b);
  std::printf("Prediction check on %s: %s K/V at %d bits (smoothing from the report), each of %zu components dropped "
              "alone to %d bits; %d window(s) of %d tokens of %s, %lld scored positions per variant, quantized where "
              "the runtime quantizes (sink %d, fp16 window %d); %.0f s\n",
              c.name.c_str(), kv_method_name(ko.method), a.check_bits, comps.size(), a.check_drop, a.check_windows, a.ctx,
              a.file.c_str(), (long long)r.scored, base.sink, base.window, r.seconds);
  std::printf("KL(f16 || base) = %.5f; measured dKL = KL(f16 || dropped) - KL(f16 || base)\n\n", r.kl_base);
  std::printf("| predictor | Spearman rho vs dKL | vs KL(base || dropped) |\n|---|---|---|\n");
  std::printf("| RateQuant w * dD (per-component fits) | %.3f | %.3f |\n", rho_rq, rho_rq_b);
  if (have_pm) std::printf("| PM-KVQ ds | %.3f | %.3f |\n", spearman(pm, dkl), spearman(pm, kl_b));
  std::printf("\ngoal: rho >= 0.8 (RateQuant w * dD vs dKL): %s\n", rho_rq >= 0.8 ? "met" : "missed");
  if (!a.json.empty()) {
    nlohmann::json out = {{"report", a.report_in},   {"text", a.file},       {"ctx", a.ctx},
                          {"windows", a.check_windows}, {"bits", a.check_bits}, {"drop", a.check_drop},
                          {"kl_base", r.kl_base},    {"spearman_ratequant", rho_rq},
                          {"spearman_ratequant_vs_kl_from_base", rho_rq_b}, {"components", rows}};
    if (have_pm) out["spearman_pmkvq"] = spearman(pm, dkl);
    write_file_atomic(a.json, out.dump(1) + "\n");
  }
}

void run_distortion(const Args& a) {
  apply_threads(a.threads);
  auto model = load_model(a.model, a.ctx);
  const ModelConfig& c = model->config();
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  const auto ids = tok.encode(read_text_file(a.file), tok.add_bos(), false);
  MPKV_CHECK((int)ids.size() >= a.tokens, "the text has " + std::to_string(ids.size()) + " tokens, fewer than --tokens " +
                                              std::to_string(a.tokens));
  const int hd = c.head_dim, nkv = c.n_head_kv;
  std::vector<std::vector<int32_t>> windows;
  for (int start = 0; start < a.tokens; start += a.ctx)
    windows.emplace_back(ids.begin() + start, ids.begin() + start + std::min(a.ctx, a.tokens - start));
  ProgressBar collect("collect K/V", windows.size());
  const calib::KvSamples kv = calib::collect_kv(*model, windows, {}, [&](size_t w) { collect.update(w); });
  collect.finish();

  // Per component, then pooled per (method, role).
  nlohmann::json comps = nlohmann::json::array();
  struct Pool { std::vector<int> bits; std::vector<double> mse_sum; double var_sum = 0; int n = 0; };
  std::map<std::pair<std::string, std::string>, Pool> pools;
  ProgressBar meas("measure", (size_t)c.n_layer * nkv * 2);
  size_t done = 0;
  for (int l = 0; l < c.n_layer; ++l)
    for (int h = 0; h < nkv; ++h)
      for (KvRole role : {KvRole::key, KvRole::value}) {
        const auto& x = role == KvRole::key ? kv.key(l, h) : kv.value(l, h);
        const auto curves = measure_distortion_all_methods(x.data(), (int)(x.size() / hd), hd, role);
        for (const auto& cv : curves) {
          nlohmann::json j = cv;
          j["layer"] = l;
          j["head"] = h;
          comps.push_back(j);
          Pool& p = pools[{cv.method, cv.role}];
          if (p.bits.empty()) { p.bits = cv.bits; p.mse_sum.assign(cv.bits.size(), 0.0); }
          for (size_t i = 0; i < cv.mse.size(); ++i) p.mse_sum[i] += cv.mse[i];
          p.var_sum += cv.variance;
          p.n++;
        }
        meas.update(++done);
      }
  meas.finish();

  std::printf("Distortion of KV quantizers on %s: %d tokens of %s, %d layers x %d KV heads, head_dim %d\n",
              c.name.c_str(), a.tokens, a.file.c_str(), c.n_layer, nkv, hd);
  std::printf("MSE is the mean over components; fit D(b) = alpha * beta^-b on ln MSE; Gaussian bound = variance * 4^-b\n\n");
  std::printf("| quantizer | K/V | variance | bits | MSE | Gaussian bound | alpha | beta | R^2 |\n|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json fits = nlohmann::json::array();
  for (const auto& [key, p] : pools) {
    std::vector<double> mse(p.mse_sum.size());
    for (size_t i = 0; i < mse.size(); ++i) mse[i] = p.mse_sum[i] / p.n;
    const ExponentialFit f = fit_exponential(p.bits, mse);
    const double var = p.var_sum / p.n;
    std::string bits_s, mse_s, bound_s;
    nlohmann::json bound = nlohmann::json::array();
    for (size_t i = 0; i < mse.size(); ++i) {
      char b[64];
      const double g = var * std::pow(4.0, -p.bits[i]);
      bound.push_back(g);
      bits_s += (i ? ", " : "") + std::to_string(p.bits[i]);
      std::snprintf(b, sizeof b, "%s%.4g", i ? ", " : "", mse[i]); mse_s += b;
      std::snprintf(b, sizeof b, "%s%.4g", i ? ", " : "", g); bound_s += b;
    }
    std::printf("| %s | %s | %.4g | %s | %s | %s | %.4g | %.3f | %.4f |\n", key.first.c_str(), key.second.c_str(), var,
                bits_s.c_str(), mse_s.c_str(), bound_s.c_str(), f.alpha, f.beta, f.r2);
    fits.push_back({{"method", key.first}, {"role", key.second}, {"bits", p.bits}, {"mse", mse}, {"variance", var},
                    {"gaussian_bound", bound}, {"fit", f}, {"components", p.n}});
  }
  if (!a.json.empty()) {
    nlohmann::json out = {{"version", 1}, {"model", a.model}, {"model_name", c.name}, {"text", a.file},
                          {"tokens", a.tokens}, {"ctx", a.ctx}, {"head_dim", hd}, {"fits", fits}, {"components", comps}};
    write_file_atomic(a.json, out.dump(1) + "\n");
  }
}

}  // namespace

void register_distortion(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("distortion", "measure KV quantizer distortion curves on real keys/values and fit D(b)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-f,--file", a->file, "calibration text")->required();
  sub->add_option("--tokens", a->tokens, "tokens of text to collect K/V from")->capture_default_str()->check(integer_in(32, 1 << 20, "in [32, 1048576]"));
  sub->add_option("-c,--ctx,--ctx-size", a->ctx, "window size (fresh cache per window)")->capture_default_str()->check(integer_in(8, 1 << 16, "in [8, 65536]"));
  add_threads_option(sub, a->threads);
  sub->add_option("--json", a->json, "write curves and fits (per component and pooled) as JSON");
  sub->add_flag("--check", a->check, "prediction check: single-component drops, predicted vs measured (needs --report-in)");
  sub->add_option("--report-in", a->report_in, "calibration report (mpkv calibrate --report-out) for --check");
  sub->add_option("--check-bits", a->check_bits, "--check: width of the base plan")->capture_default_str();
  sub->add_option("--check-drop", a->check_drop, "--check: width one component drops to")->capture_default_str();
  sub->add_option("--check-windows", a->check_windows, "--check: text windows of --ctx tokens")
      ->capture_default_str()->check(integer_in(1, 4096, "in [1, 4096]"));
  sub->add_option("--check-stride", a->check_stride, "--check: every k-th component only")
      ->capture_default_str()->check(integer_in(1, 1 << 20, ">= 1"));
  sub->callback([a] { a->check ? run_check(*a) : run_distortion(*a); });
}

}  // namespace mpkv::cli

// mpkv distortion: measured distortion curves D(b) of every KV quantizer on the model's real
// post-RoPE keys and values, and the RateQuant fit D(b) = alpha * beta^-b per (quantizer, K|V).
//
// The text is run through the model in windows of --ctx tokens (fresh f16 cache per window) until
// --tokens tokens are seen; calib::collect_kv (the collector calibration uses) keeps keys and
// values per (layer, KV head). Each
// component is measured on its own (MSE per bit-width for every method); the per-(quantizer, K|V)
// curve is the mean MSE over components at each bit-width, fitted by least squares on ln MSE.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "calib/kv_collector.h"
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
  std::string model, file, json;
  int tokens = 2048, ctx = 512, threads = 0;
};

void run_distortion(const Args& a) {
  apply_threads(a.threads);
  auto model = Model::load(a.model);
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
  sub->callback([a] { run_distortion(*a); });
}

}  // namespace mpkv::cli

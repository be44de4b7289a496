// mpkv calibrate: model + calibration text -> sensitivities, key smoothing (positional
// interpolation), distortion fits -> bit allocation -> a KV plan file (docs/plan_format.md,
// docs/calibration.md).
//
// Two stages, so one calibration serves many plans:
//   1. calibration (src/calib/calibrate.h run_calibration): key maxima at positions t * pi_scale,
//      per-layer smoothing alpha (scored at the plan's bits, alpha 0 = none), gradients -> PM-KVQ
//      s(b) and RateQuant w, both over what the plan's cache quantizes (sink and fp16 window left out);
//      then the distortion fits D(b) = alpha beta^-b per (layer, KV head, K|V) on the K/V of the
//      first kFitWindows windows as the cache stores them (calib/kv_collector.h,
//      calib/distortion_fits.h). The result is calib::CalibrationInputs; --report-out saves it
//      (with the full report), --report-in reads it back.
//   2. allocation (src/calib/plan_allocation.h allocate_plan): pmkvq | ratequant | combined under a
//      budget counted by the KV cache's own accounting for one sequence of --max-len tokens.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

#include <nlohmann/json.hpp>

#include "calib/calibrate.h"
#include "calib/calibration_inputs.h"
#include "calib/distortion_fits.h"
#include "calib/kv_collector.h"
#include "calib/plan_allocation.h"
#include "calib_report.h"
#include "cli_util.h"
#include "cli_options.h"
#include "commands.h"
#include "kvcache/kv_cache_factory.h"
#include "quant/distortion.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/units.h"
#include "util/progress.h"

namespace mpkv::cli {

namespace {

// Windows whose K/V the distortion fits are measured on (2 x 512 tokens x 90 components is plenty
// for a 3-point fit and costs about a second).
constexpr int kFitWindows = 2;

struct Args {
  std::string model, method, out, calib_file, quantizer = "uniform", report_out, report_in;
  double avg_bits = 0, budget_mib = 0, pi_scale = 4;
  int64_t max_len = 0;
  int calib_n = 16, calib_len = 512, window = kDefaultKvWindow, sink = kDefaultKvSink, threads = 0;
  int k_bits = 0, v_bits = 0;  // --method fixed: an explicit K/V split
  std::vector<int> layer_windows;  // per-layer fp16 windows (empty: --window everywhere)
  double force_beta = 0;
  bool smooth = true, per_head = false, progress = true, all_pairs = false, progressive = false, direct = false;
};

// --max-len, or the 4096 tokens a plan is solved for when it is not given.
int64_t max_len_or_default(const Args& a) { return a.max_len > 0 ? a.max_len : 4096; }

// Widths the sensitivities are measured at: every width an allocation method chooses from (the
// ratequant set contains pmkvq's and combined's ladder {2, 4, 8}).
std::vector<int> sensitivity_bits(QuantMethod m) { return calib::plan_candidate_bits(calib::PlanMethod::ratequant, m); }

calib::CalibrationDataOptions data_options(const Args& a) {
  calib::CalibrationDataOptions d;
  d.n_samples = a.calib_n;
  d.sample_len = a.calib_len;
  d.pi_scale = a.pi_scale;
  return d;
}

// The allocation request (validated, budget checked) before anything is calibrated.
calib::PlanRequest plan_request(const Args& a, CLI::App* sub, const ModelConfig& c, const KvModelIdentity& id) {
  const bool by_bits = sub->count("--avg-bits") > 0, by_budget = sub->count("--kv-budget-mib") > 0;
  const bool by_split = sub->count("--k-bits") + sub->count("--v-bits") > 0;
  MPKV_CHECK(by_split ? !by_bits && !by_budget : by_bits != by_budget,
             "give exactly one of --avg-bits B, --kv-budget-mib M (with --max-len N) or, for --method fixed, "
             "--k-bits K --v-bits V");
  MPKV_CHECK(!by_budget || (std::isfinite(a.budget_mib) && a.budget_mib > 0),
             "--kv-budget-mib must be a positive number of MiB");
  MPKV_CHECK(!by_budget || sub->count("--max-len") > 0,
             "--kv-budget-mib needs --max-len N (the tokens the budget must hold)");
  calib::PlanRequest r;
  r.method = calib::parse_plan_method(a.method);
  r.per_head = a.per_head;
  r.quantizer = parse_method(a.quantizer);
  r.dims = c.kv_dims();  // with the sliding windows: the byte model counts a windowed layer's pages
  r.model = id;
  r.max_len = max_len_or_default(a);
  r.window = a.window;
  r.sink = a.sink;
  r.layer_windows = a.layer_windows;
  r.budget_bytes = by_budget ? (int64_t)std::floor(a.budget_mib * 1048576.0) : 0;
  r.avg_bits = a.avg_bits;
  r.progressive = a.progressive;
  r.k_bits = a.k_bits;
  r.v_bits = a.v_bits;
  r.direct = a.direct;
  r.force_beta = a.force_beta;
  calib::resolve_budget(r);  // Error now, not after minutes of calibration
  return r;
}

void validate_args(const Args& a) {
  MPKV_CHECK(!a.out.empty(), "give the output plan file with -o");
  const std::filesystem::path dir = std::filesystem::absolute(a.out).parent_path();
  MPKV_CHECK(std::filesystem::is_directory(dir), "-o " + a.out + ": the directory " + dir.string() + " does not exist");
  if (a.report_in.empty()) {
    MPKV_CHECK(!a.calib_file.empty(), "give the calibration text with --calib-file F (or a report with --report-in)");
    calib::validate(data_options(a));
  } else {
    MPKV_CHECK(a.report_out.empty(), "--report-in and --report-out together: the report is already saved");
  }
  QuantOptions o;
  o.method = parse_method(a.quantizer);
  for (int b : sensitivity_bits(o.method)) {
    o.bits = b;
    validate(o);
  }
}

// The smoothing search's widths: the plan's average bits as a fixed plan stores them (b + 0.5:
// keys b + 1, values b), each raised to the next width the quantizer supports.
std::pair<int, int> smoothing_bits(QuantMethod q, double avg_bits) {
  const std::vector<int> ok = supported_distortion_bits(q);
  const auto up = [&](int b) {
    for (int w : ok)
      if (w >= b) return w;
    return ok.back();
  };
  const int lo = std::max(1, (int)std::floor(avg_bits + 1e-9));
  const bool half = avg_bits - lo > 1e-9;
  return {up(half ? lo + 1 : lo), up(lo)};
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

void print_calibration(const Args& a, const calib::CalibrationReport& r, const calib::CalibrationInputs& in) {
  std::printf("calibration: %d x %d tokens of %s (pi-scale %g), mean loss %.4f; %s\n", a.calib_n, a.calib_len,
              a.calib_file.c_str(), a.pi_scale, r.mean_loss, a.smooth ? "key smoothing on" : "no smoothing");
  std::printf("  phases: weights %.1f s, key maxima %.1f s, alpha search %.1f s, gradients %.1f s, fits %.1f s\n",
              r.timings.weights_s, r.timings.key_maxima_s, r.timings.alpha_search_s, r.timings.gradients_s,
              in.total_s - r.timings.total_s);
  std::printf("  distortion fits (%s), pooled: K alpha %.4g beta %.3f (R^2 %.4f), V alpha %.4g beta %.3f (R^2 %.4f)\n",
              a.quantizer.c_str(), in.fit_k.alpha, in.fit_k.beta, in.fit_k.r2, in.fit_v.alpha, in.fit_v.beta,
              in.fit_v.r2);
  std::printf("  per (layer, head, K|V) fits over bits {%s}: R^2 min %.4f, mean %.4f\n",
              join_ints(in.fits.bits).c_str(), in.fits.min_r2(), in.fits.mean_r2());
  int no_smoothing = 0;
  for (double al : r.smoothing.alpha) no_smoothing += al == 0.0;
  if (a.smooth)
    std::printf("  smoothing: %d of %d layers chose alpha 0 (no smoothing)\n", no_smoothing, (int)r.smoothing.alpha.size());
}

// Stage 1 from scratch: calibration + distortion fits. `report` receives the full JSON report.
calib::CalibrationInputs calibrate_now(const Args& a, const Model& model, const Tokenizer& tok,
                                       const KvModelIdentity& id, const calib::PlanRequest& req,
                                       nlohmann::json& report) {
  const QuantMethod q = parse_method(a.quantizer);
  const calib::CalibrationData data =
      calib::make_calibration_data(tok, calib::read_calibration_text(a.calib_file), data_options(a));
  calib::CalibrationOptions o;
  o.smooth = a.smooth;
  o.progress = a.progress;
  o.sensitivity.key.method = o.sensitivity.value.method = q;
  o.sensitivity.bits = sensitivity_bits(q);
  o.smoothing.key.method = o.smoothing.value.method = q;
  const double plan_bits = calib::budget_avg_bits(req, calib::resolve_budget(req));
  std::tie(o.smoothing.key.bits, o.smoothing.value.bits) = smoothing_bits(q, plan_bits);
  // Sensitivities over what this plan's cache quantizes (sink, fp16 window, token groups).
  const KvPlan runtime = calib::request_plan(req, calib::plan_candidate_bits(req.method, q).front());
  if (!a.all_pairs) o.runtime = runtime;
  const double t0 = now_s();
  const std::clock_t cpu0 = std::clock();
  const calib::CalibrationReport r = calib::run_calibration(model, data, o);

  // Distortion fits on the K/V as the cache stores them: the engine's forward with the smoothing.
  const int nw = std::min<int>(kFitWindows, (int)data.samples.size());
  ProgressBar bar("calibrate: distortion fits", nw + 1, a.progress);
  const std::vector<std::vector<int32_t>> windows(data.samples.begin(), data.samples.begin() + nw);
  const calib::KvSamples kv =
      calib::collect_kv(model, windows, r.smoothing.lambda, [&](size_t w) { bar.update(w); }, runtime.sink);
  calib::ComponentFits fits = calib::fit_components(kv, q, supported_distortion_bits(q));
  bar.finish();
  const calib::CalibrationInputs in =
      calib::make_calibration_inputs(r, std::move(fits), id, q, {a.calib_file, a.calib_n, a.calib_len, a.pi_scale},
                                     now_s() - t0, (double)(std::clock() - cpu0) / CLOCKS_PER_SEC);
  report = r;
  report.update(nlohmann::json(in));  // the inputs' keys (what --report-in reads) over the full report
  report["distortion_fits"]["windows"] = nw;
  report["distortion_fits"]["bits"] = in.fits.bits;
  report["smoothing_bits"] = {o.smoothing.key.bits, o.smoothing.value.bits};
  report["sensitivity_over"] = a.all_pairs ? "all positions and pairs" : "the runtime's quantized pairs";
  report["alpha_search_over"] = report["sensitivity_over"];
  print_calibration(a, r, in);
  return in;
}

// Stage 1 from a saved report; Error unless it is a report for this model and quantizer.
calib::CalibrationInputs read_report(const Args& a, const ModelConfig& c, const KvModelIdentity& id) {
  const std::string where = "--report-in " + a.report_in + ": ";
  const calib::CalibrationInputs in = read_calibration_report(a.report_in, where, c, id);
  MPKV_CHECK(method_name(in.quantizer) == a.quantizer, where + "calibrated for the " +
                                                           std::string(method_name(in.quantizer)) +
                                                           " quantizer, --quantizer is " + a.quantizer);
  MPKV_CHECK(a.smooth || in.smoothing.empty(),
             where + "the report was calibrated with smoothing; --no-smooth needs a fresh calibration");
  return in;
}

// Final bits of one role: "n x bb, ..."; with sliding-window layers, "global ... / windowed ...".
std::string bits_histogram(const KvPlan& p, KvRole role) {
  std::map<int, int> h[2];  // [windowed?]
  for (int l = 0; l < p.dims.n_layer; ++l)
    for (int k = 0; k < p.dims.n_head_kv; ++k) h[p.dims.window_of(l) > 0][p.at(l, k, role).bits]++;
  std::string out;
  for (int w = 0; w < 2; ++w) {
    if (h[w].empty()) continue;
    std::string s;
    for (auto [b, n] : h[w]) s += (s.empty() ? "" : ", ") + std::to_string(n) + " x " + std::to_string(b) + "b";
    out += (out.empty() ? "" : " / ") + (p.dims.window.empty() ? "" : std::string(w ? "windowed " : "global ")) + s;
  }
  return out;
}

void run_calibrate(const Args& a, CLI::App* sub) {
  validate_args(a);
  const double t_start = now_s();
  const std::clock_t cpu_start = std::clock();
  apply_threads(a.threads);
  // The plan serves sequences of --max-len tokens (default 4096, as plan_request): that context
  // chooses phi3's longrope factors, so the keys are calibrated as they will be rotated.
  auto model = load_model(a.model, (int)std::min<int64_t>(max_len_or_default(a), INT32_MAX));
  const ModelConfig& c = model->config();
  const KvModelIdentity id = kv_model_identity(*model);
  const calib::PlanRequest req = plan_request(a, sub, c, id);
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());

  nlohmann::json report;
  const calib::CalibrationInputs in =
      a.report_in.empty() ? calibrate_now(a, *model, tok, id, req, report) : read_report(a, c, id);
  if (!a.report_out.empty()) {
    write_file_atomic(a.report_out, report.dump(1) + "\n");
    std::printf("calibration report: %s\n", a.report_out.c_str());
  } else if (!a.report_in.empty()) {
    std::printf("calibration: read from %s (it took %.1f s wall, %.1f s CPU)\n", a.report_in.c_str(), in.total_s,
                in.cpu_s);
  }

  // Stage 2: allocation.
  const double t_alloc = now_s();
  calib::PlanAllocation pa = calib::allocate_plan(in, req);
  KvPlan& plan = pa.plan;
  plan.provenance.report = a.report_in.empty() ? a.report_out : a.report_in;
  write_file_atomic(a.out, kv_plan_to_json(plan));
  std::printf("%s\n", pa.summary.c_str());
  std::printf("plan %s: %s, %s%.3f average bits for %lld tokens (budget %.2f MiB), K: %s; V: %s%s\n", a.out.c_str(),
              a.method.c_str(), plan.progressive ? "progressive, " : "", plan.solve.avg_bits, (long long)req.max_len,
              plan.solve.budget_bytes / 1048576.0, bits_histogram(plan, KvRole::key).c_str(),
              bits_histogram(plan, KvRole::value).c_str(),
              plan.smoothing.empty() ? "" : "; key smoothing scales included");
  std::printf("time: calibration %.1f s wall / %.1f s CPU%s, allocation %.2f s, total %.1f s wall / %.1f s CPU\n",
              in.total_s, in.cpu_s, a.report_in.empty() ? "" : " (earlier, from the report)", now_s() - t_alloc,
              now_s() - t_start, (double)(std::clock() - cpu_start) / CLOCKS_PER_SEC);
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("calibrate", "calibrate the model and write a mixed-precision KV plan");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("--method", a->method, "pmkvq | ratequant | combined | fixed")->required();
  sub->add_option("--avg-bits", a->avg_bits,
                  "average bits: the budget is the KV bytes of every component at B bits for --max-len tokens");
  sub->add_option("--kv-budget-mib", a->budget_mib, "KV budget of one sequence of --max-len tokens, MiB");
  sub->add_option("--max-len", a->max_len, "tokens the budget is solved for (default 4096)");
  sub->add_option("-o,--out", a->out, "plan file to write (JSON, atomically)")->required();
  sub->add_option("--calib-file", a->calib_file, "calibration text");
  sub->add_option("--calib-n", a->calib_n, "calibration windows")->capture_default_str();
  sub->add_option("--calib-len", a->calib_len, "tokens per window")->capture_default_str();
  sub->add_option("--pi-scale", a->pi_scale, "RoPE position scale for the key maxima (positional interpolation)")
      ->capture_default_str();
  sub->add_option("--quantizer", a->quantizer, "uniform | kivi | rotated | turbo")->capture_default_str();
  sub->add_option("--window", a->window, "recent tokens kept at fp16")->capture_default_str();
  sub->add_option("--layer-windows", a->layer_windows,
                  "each layer's fp16 window, one per layer (the plan's layer_windows; replaces --window)")
      ->delimiter(',');
  sub->add_option("--sink", a->sink, "first tokens kept at fp16")->capture_default_str();
  sub->add_flag("--smooth,!--no-smooth", a->smooth, "key smoothing (default on)");
  sub->add_flag("--per-head", a->per_head, "pmkvq: one width per (layer, KV head) instead of per layer");
  sub->add_flag("--progressive", a->progressive, "fixed: finals on the ladder, pages start at 16 bits");
  sub->add_option("--k-bits", a->k_bits, "fixed: key bits of an explicit K/V split (with --v-bits, instead of --avg-bits)")
      ->check(integer_in(1, 8, "in [1, 8]"));
  sub->add_option("--v-bits", a->v_bits, "fixed: value bits of an explicit K/V split")->check(integer_in(1, 8, "in [1, 8]"));
  sub->add_flag("--direct", a->direct, "pmkvq / combined: write the finals as a fixed-width plan (ablation)");
  sub->add_option("--force-beta", a->force_beta, "ratequant / combined: replace every fitted beta (ablation)");
  sub->add_flag("--all-pairs", a->all_pairs,
                "sensitivities over every position and (query, key) pair, not only what the cache quantizes");
  sub->add_option("--report-out", a->report_out, "save the calibration report (JSON) for --report-in");
  sub->add_option("--report-in", a->report_in, "reuse a saved calibration report instead of calibrating");
  add_threads_option(sub, a->threads);
  sub->callback([a, sub] { run_calibrate(*a, sub); });
}

}  // namespace mpkv::cli

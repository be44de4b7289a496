// mpkv calibrate: model + calibration text -> sensitivities, key smoothing (positional
// interpolation), distortion fits -> bit allocation -> a KV plan file (docs/plan_format.md).
//
// Two stages, so one calibration serves many plans:
//   1. calibration (src/calib/calibrate.h run_calibration): key maxima at positions t * pi_scale,
//      per-layer smoothing alpha, gradients -> PM-KVQ s(b) and RateQuant w; then the distortion fits
//      D(b) = alpha beta^-b per K|V, measured here on the keys as stored (smoothed, post-RoPE) and the
//      values of the first kFitWindows windows (quant/distortion.h). --report-out saves all of it;
//      --report-in reads it back instead of recomputing (the model's identity must match).
//   2. allocation (src/alloc), all for one sequence of --max-len tokens, memory counted as in
//      alloc/kv_memory.h (codes, scales, zeros, fp16 sink and window):
//      pmkvq      PM-KVQ's integer program over bits {2,3,4,8}, per layer (K and V of a layer share
//                 it, the paper) or --per-head. --avg-bits B means the budget = the memory of every
//                 component at B bits for max_len tokens (B may be fractional: memory is linear in bits).
//      ratequant  RateQuant's water-filling + exact knapsack over {2,3,4,8} per (layer, KV head, K|V);
//                 --kv-budget-mib M is turned into the average bits whose uniform memory is M.
//      combined   RateQuant finals restricted to the halving ladder {2,4,8}, reached progressively
//                 from 16 bits (plan.progressive = true).
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "alloc/pmkvq_allocator.h"
#include "alloc/progressive_schedule.h"
#include "alloc/ratequant_allocator.h"
#include "calib/calibrate.h"
#include "cli_util.h"
#include "cli_options.h"
#include "commands.h"
#include "kvcache/f16_kv_cache.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "quant/distortion.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/progress.h"

namespace mpkv::cli {

namespace {

// Windows whose K/V the distortion fits are measured on (2 x 512 tokens x 90 components is plenty
// for a 3-point fit and costs about a second).
constexpr int kFitWindows = 2;
constexpr const char* kReportFormat = "mpkv-calibration-report";

struct Args {
  std::string model, method, out, calib_file, quantizer = "uniform", report_out, report_in;
  double avg_bits = 0, budget_mib = 0, pi_scale = 4;
  int64_t max_len = 0;
  int calib_n = 16, calib_len = 512, window = kDefaultKvWindow, sink = kDefaultKvSink, threads = 0;
  bool smooth = true, per_head = false, progress = true;
};

// What the allocators need from a calibration (computed now or read from a report).
struct CalibInputs {
  std::vector<int> bits;                                         // PM-KVQ candidate widths
  std::vector<std::vector<std::vector<double>>> pmkvq_k, pmkvq_v;  // [layer][head][bit index]
  std::vector<std::vector<double>> w_k, w_v;                      // [layer][head]
  std::vector<std::vector<float>> lambda;                         // [layer][n_head_kv * head_dim] or empty
  ExponentialFit fit_k, fit_v;
  double total_s = 0, cpu_s = 0;
  std::string calib_file;
  int calib_n = 0, calib_len = 0;
  double pi_scale = 0;
  bool smooth = false;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool is_min_max(QuantMethod m) { return m != QuantMethod::turbo; }

// Widths PM-KVQ / RateQuant choose from: min-max codes {2,3,4,8} (5-7 have no packed layout,
// 1-bit min-max is worse than nothing); turbo's codebooks {1,2,3,4}.
std::vector<int> candidate_bits(QuantMethod m) {
  return is_min_max(m) ? std::vector<int>{2, 3, 4, 8} : std::vector<int>{1, 2, 3, 4};
}

// Memory of one sequence of max_len tokens with every component's body at `bits` (fractional
// allowed: row bytes are linear in bits, so the value between two supported widths is exact).
double uniform_bytes(const KvMemorySpec& layer_spec, int n_layer, double bits) {
  const double b2 = (double)kv_component_bytes(layer_spec, 2), b4 = (double)kv_component_bytes(layer_spec, 4);
  return n_layer * (b2 + (bits - 2.0) / 2.0 * (b4 - b2));
}

void validate_args(const Args& a, CLI::App* sub) {
  MPKV_CHECK(a.method == "pmkvq" || a.method == "ratequant" || a.method == "combined",
             "--method '" + a.method + "' is not one of pmkvq, ratequant, combined");
  const bool by_bits = sub->count("--avg-bits") > 0, by_budget = sub->count("--kv-budget-mib") > 0;
  MPKV_CHECK(by_bits != by_budget, "give exactly one of --avg-bits B or --kv-budget-mib M (with --max-len N)");
  const QuantMethod q = parse_method(a.quantizer);
  const std::vector<int> cb = candidate_bits(q);
  if (by_bits) {
    MPKV_CHECK(std::isfinite(a.avg_bits) && a.avg_bits >= cb.front() && a.avg_bits <= cb.back(),
               "--avg-bits " + std::to_string(a.avg_bits) + " is outside [" + std::to_string(cb.front()) + ", " +
                   std::to_string(cb.back()) + "] for the " + a.quantizer + " quantizer");
  } else {
    MPKV_CHECK(std::isfinite(a.budget_mib) && a.budget_mib > 0, "--kv-budget-mib must be a positive number of MiB");
    MPKV_CHECK(sub->count("--max-len") > 0, "--kv-budget-mib needs --max-len N (the tokens the budget must hold)");
  }
  MPKV_CHECK(a.max_len >= 0 && a.max_len <= (1 << 24), "--max-len must be in [1, 2^24]");
  MPKV_CHECK(a.window >= 0 && a.sink >= 0, "--window and --sink must be >= 0");
  MPKV_CHECK(!a.per_head || a.method == "pmkvq", "--per-head applies to --method pmkvq only");
  MPKV_CHECK(a.method != "combined" || is_min_max(q),
             "--method combined shrinks codes by halving shifts, which needs min-max codes (uniform, kivi, "
             "rotated), not " + a.quantizer);
  MPKV_CHECK(!a.out.empty(), "give the output plan file with -o");
  const std::filesystem::path dir = std::filesystem::absolute(a.out).parent_path();
  MPKV_CHECK(std::filesystem::is_directory(dir), "-o " + a.out + ": the directory " + dir.string() + " does not exist");
  if (a.report_in.empty()) {
    MPKV_CHECK(!a.calib_file.empty(), "give the calibration text with --calib-file F (or a report with --report-in)");
    calib::CalibrationDataOptions d;
    d.n_samples = a.calib_n;
    d.sample_len = a.calib_len;
    d.pi_scale = a.pi_scale;
    calib::validate(d);
  } else {
    MPKV_CHECK(a.report_out.empty(), "--report-in and --report-out together: the report is already saved");
  }
  QuantOptions o;
  o.method = q;
  for (int b : cb) {
    o.bits = b;
    validate(o);
  }
}

// Pooled fit per role over every (layer, KV head) of the sample K/V (the mean MSE per width).
ExponentialFit pooled_fit(const QuantOptions& base, const std::vector<std::vector<float>>& xs, int head_dim,
                          const std::vector<int>& bits) {
  std::vector<double> mse(bits.size(), 0.0);
  for (const auto& x : xs) {
    const DistortionCurve c = measure_distortion(base, x.data(), (int)(x.size() / head_dim), bits);
    for (size_t i = 0; i < bits.size(); ++i) mse[i] += c.mse[i] / (double)xs.size();
  }
  return fit_exponential(bits, mse);
}

// Stage 1 from scratch: calibration + distortion fits. `report` receives the JSON report.
CalibInputs calibrate_now(const Args& a, const Model& model, const Tokenizer& tok, nlohmann::json& report) {
  const ModelConfig& c = model.config();
  const QuantMethod q = parse_method(a.quantizer);
  calib::CalibrationDataOptions d;
  d.n_samples = a.calib_n;
  d.sample_len = a.calib_len;
  d.pi_scale = a.pi_scale;
  const calib::CalibrationData data = calib::make_calibration_data(tok, calib::read_calibration_text(a.calib_file), d);
  calib::CalibrationOptions o;
  o.smooth = a.smooth;
  o.progress = a.progress;
  o.sensitivity.key.method = o.sensitivity.value.method = q;
  o.sensitivity.bits = candidate_bits(q);
  o.smoothing.key.method = o.smoothing.value.method = q;
  if (!is_min_max(q)) o.smoothing.key.bits = o.smoothing.value.bits = 4;
  const double t0 = now_s();
  const std::clock_t cpu0 = std::clock();
  const calib::CalibrationReport r = calib::run_calibration(model, data, o);

  // Distortion fits on the K/V as the cache stores them: the engine's forward with the smoothing.
  const int hd = c.head_dim, nkv = c.n_head_kv;
  std::vector<std::vector<float>> keys((size_t)c.n_layer * nkv), vals = keys;
  {
    Forward fwd(model);
    fwd.set_qk_smoothing(r.smoothing.lambda);
    fwd.set_kv_observer([&](int layer, int n, const float* k, const float* v) {
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < nkv; ++h) {
          const size_t off = ((size_t)t * nkv + h) * hd;
          keys[(size_t)layer * nkv + h].insert(keys[(size_t)layer * nkv + h].end(), k + off, k + off + hd);
          vals[(size_t)layer * nkv + h].insert(vals[(size_t)layer * nkv + h].end(), v + off, v + off + hd);
        }
    });
    const int nw = std::min<int>(kFitWindows, (int)data.samples.size());
    ProgressBar bar("calibrate: distortion fits", nw + 1, a.progress);
    std::vector<float> logits;
    for (int w = 0; w < nw; ++w) {
      F16KvCache cache({c.n_layer, c.n_head, nkv, hd});
      std::vector<BatchToken> batch;
      const int n = (int)data.samples[w].size();
      for (int i = 0; i < n; ++i) batch.push_back({data.samples[w][i], i, 0, i == n - 1});
      fwd.run(cache, batch, logits);
      bar.update(w + 1);
    }
    QuantOptions kb{q, KvRole::key, 4, hd}, vb{q, KvRole::value, 4, hd};
    CalibInputs in;
    in.fit_k = pooled_fit(kb, keys, hd, default_distortion_bits(q));
    in.fit_v = pooled_fit(vb, vals, hd, default_distortion_bits(q));
    bar.finish();
    in.bits = r.sensitivity.bits;
    in.pmkvq_k = r.sensitivity.pmkvq_key;
    in.pmkvq_v = r.sensitivity.pmkvq_value;
    in.w_k = r.sensitivity.w_key;
    in.w_v = r.sensitivity.w_value;
    in.lambda = r.smoothing.lambda;
    in.total_s = now_s() - t0;
    in.cpu_s = (double)(std::clock() - cpu0) / CLOCKS_PER_SEC;
    in.calib_file = a.calib_file;
    in.calib_n = a.calib_n;
    in.calib_len = a.calib_len;
    in.pi_scale = a.pi_scale;
    in.smooth = a.smooth;
    report = r;
    report["format"] = kReportFormat;
    report["version"] = 1;
    report["quantizer"] = a.quantizer;
    report["calib_file"] = a.calib_file;
    report["distortion_fits"] = {{"key", in.fit_k}, {"value", in.fit_v}, {"windows", nw},
                                 {"bits", default_distortion_bits(q)}};
    report["calibrate_total_s"] = in.total_s;
    report["calibrate_cpu_s"] = in.cpu_s;
    std::printf("calibration: %d x %d tokens of %s (pi-scale %g), mean loss %.4f; %s\n", a.calib_n, a.calib_len,
                a.calib_file.c_str(), a.pi_scale, r.mean_loss, a.smooth ? "key smoothing on" : "no smoothing");
    std::printf("  phases: weights %.1f s, key maxima %.1f s, alpha search %.1f s, gradients %.1f s, fits %.1f s\n",
                r.timings.weights_s, r.timings.key_maxima_s, r.timings.alpha_search_s, r.timings.gradients_s,
                in.total_s - r.timings.total_s);
    std::printf("  distortion fits (%s): K alpha %.4g beta %.3f (R^2 %.4f), V alpha %.4g beta %.3f (R^2 %.4f)\n",
                a.quantizer.c_str(), in.fit_k.alpha, in.fit_k.beta, in.fit_k.r2, in.fit_v.alpha, in.fit_v.beta,
                in.fit_v.r2);
    return in;
  }
}

// Stage 1 from a saved report; Error unless it is a report for this model and quantizer.
CalibInputs read_report(const Args& a, const ModelConfig& c, const KvModelIdentity& id) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(a.report_in));
  } catch (const nlohmann::json::exception& e) {
    throw Error("--report-in " + a.report_in + ": not valid JSON (" + e.what() + ")");
  }
  const std::string where = "--report-in " + a.report_in + ": ";
  MPKV_CHECK(j.is_object() && j.value("format", "") == kReportFormat, where + "not an mpkv calibration report");
  try {
    const auto& m = j.at("model");
    MPKV_CHECK(m.at("arch").get<std::string>() == id.arch &&
                   m.at("tensor_layout_hash").get<std::string>() == format_layout_hash(id.tensor_layout_hash),
               where + "the report is for another model (" + m.at("arch").get<std::string>() + ", " +
                   m.at("tensor_layout_hash").get<std::string>() + "), this model is " + id.arch + ", " +
                   format_layout_hash(id.tensor_layout_hash));
    MPKV_CHECK(j.at("quantizer").get<std::string>() == a.quantizer,
               where + "calibrated for the " + j.at("quantizer").get<std::string>() + " quantizer, --quantizer is " +
                   a.quantizer);
    CalibInputs in;
    const auto& s = j.at("sensitivity");
    in.bits = s.at("bits").get<std::vector<int>>();
    in.pmkvq_k = s.at("pmkvq_key").get<decltype(in.pmkvq_k)>();
    in.pmkvq_v = s.at("pmkvq_value").get<decltype(in.pmkvq_v)>();
    in.w_k = s.at("ratequant_w_key").get<decltype(in.w_k)>();
    in.w_v = s.at("ratequant_w_value").get<decltype(in.w_v)>();
    in.smooth = j.contains("smoothing");
    if (in.smooth) {
      calib::SmoothingScales sc = j.at("smoothing").get<calib::SmoothingScales>();
      in.lambda = sc.lambda;
    }
    MPKV_CHECK(a.smooth || !in.smooth, where + "the report was calibrated with smoothing; "
                                                                 "--no-smooth needs a fresh calibration");
    in.fit_k = j.at("distortion_fits").at("key").get<ExponentialFit>();
    in.fit_v = j.at("distortion_fits").at("value").get<ExponentialFit>();
    in.total_s = j.at("calibrate_total_s").get<double>();
    in.cpu_s = j.at("calibrate_cpu_s").get<double>();
    in.calib_file = j.at("calib_file").get<std::string>();
    in.calib_n = j.at("data").at("n_samples").get<int>();
    in.calib_len = j.at("data").at("sample_len").get<int>();
    in.pi_scale = j.at("data").at("pi_scale").get<double>();
    const auto shape_ok = [&](const auto& t) {
      if ((int)t.size() != c.n_layer) return false;
      for (const auto& row : t)
        if ((int)row.size() != c.n_head_kv) return false;
      return true;
    };
    MPKV_CHECK(shape_ok(in.pmkvq_k) && shape_ok(in.pmkvq_v) && shape_ok(in.w_k) && shape_ok(in.w_v),
               where + "sensitivity tables do not match the model's " + std::to_string(c.n_layer) + " layers x " +
                   std::to_string(c.n_head_kv) + " KV heads");
    for (const auto& t : {in.pmkvq_k, in.pmkvq_v})
      for (const auto& l : t)
        for (const auto& h : l) MPKV_CHECK(h.size() == in.bits.size(), where + "a PM-KVQ row has the wrong length");
    return in;
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "malformed report (" + e.what() + ")");
  }
}

std::string bits_histogram(const KvPlan& p, KvRole role) {
  std::map<int, int> h;
  for (int l = 0; l < p.dims.n_layer; ++l)
    for (int k = 0; k < p.dims.n_head_kv; ++k) h[p.at(l, k, role).bits]++;
  std::string s;
  for (auto [b, n] : h) s += (s.empty() ? "" : ", ") + std::to_string(n) + " x " + std::to_string(b) + "b";
  return s;
}

void run_calibrate(const Args& a, CLI::App* sub) {
  validate_args(a, sub);
  const double t_start = now_s();
  const std::clock_t cpu_start = std::clock();
  apply_threads(a.threads);
  auto model = Model::load(a.model);
  const ModelConfig& c = model->config();
  const KvModelIdentity id = kv_model_identity(*model);
  const KvDims dims{c.n_layer, c.n_head, c.n_head_kv, c.head_dim};
  const QuantMethod q = parse_method(a.quantizer);
  const int64_t max_len = a.max_len > 0 ? a.max_len : 4096;
  // PM-KVQ's per-layer block and one K or V head (RateQuant) under the same memory count.
  KvMemorySpec layer_spec{c.head_dim, 0, c.n_head_kv, 2, max_len, a.sink, a.window};
  KvMemorySpec head_spec = layer_spec;
  head_spec.heads = 1;
  head_spec.tensors = 1;
  validate(layer_spec);
  const int64_t budget = a.budget_mib > 0 ? (int64_t)std::floor(a.budget_mib * 1048576.0)
                                          : (int64_t)std::floor(uniform_bytes(layer_spec, c.n_layer, a.avg_bits));
  const std::vector<int> cb = candidate_bits(q);
  {  // the budget must hold every component at the lowest width: checked before calibrating
    const double lo = uniform_bytes(layer_spec, c.n_layer, cb.front());
    MPKV_CHECK((double)budget >= lo - 0.5,
               "a budget of " + std::to_string(budget / 1048576.0) + " MiB cannot hold " + std::to_string(max_len) +
                   " tokens at " + std::to_string(cb.front()) + " bits; the smallest feasible budget is " +
                   std::to_string(lo / 1048576.0) + " MiB (" + std::to_string((int64_t)std::ceil(lo)) + " bytes)");
  }
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());

  nlohmann::json report;
  const CalibInputs in = a.report_in.empty() ? calibrate_now(a, *model, tok, report) : read_report(a, c, id);
  if (!a.report_out.empty()) {
    report["model"]["arch"] = id.arch;
    report["model"]["tensor_layout_hash"] = format_layout_hash(id.tensor_layout_hash);
    write_file_atomic(a.report_out, report.dump(1) + "\n");
    std::printf("calibration report: %s\n", a.report_out.c_str());
  } else if (!a.report_in.empty()) {
    std::printf("calibration: read from %s (it took %.1f s wall, %.1f s CPU)\n", a.report_in.c_str(), in.total_s,
                in.cpu_s);
  }

  // Stage 2: allocation.
  KvComponentPlan base;
  base.quantizer = q;
  KvPlan plan = uniform_kv_plan(dims, base, base);
  plan.window = a.window;
  plan.sink = a.sink;
  plan.model = id;
  plan.smoothing = in.lambda;
  plan.method = a.method;
  plan.solve.max_len = max_len;
  plan.solve.budget_bytes = budget;
  plan.solve.target_avg_bits = a.budget_mib > 0 ? 0 : a.avg_bits;
  const double t_alloc = now_s();
  if (a.method == "pmkvq") {
    PmkvqProblem p;
    p.bits = in.bits;
    p.budget_bytes = budget;
    p.memory = layer_spec;
    if (a.per_head) p.memory.heads = 1;
    for (int l = 0; l < c.n_layer; ++l) {
      if (a.per_head) {
        for (int h = 0; h < c.n_head_kv; ++h) {
          std::vector<double> s;
          for (size_t b = 0; b < in.bits.size(); ++b) s.push_back(in.pmkvq_k[l][h][b] + in.pmkvq_v[l][h][b]);
          p.sensitivity.push_back(s);
        }
      } else {
        std::vector<double> s(in.bits.size(), 0.0);
        for (int h = 0; h < c.n_head_kv; ++h)
          for (size_t b = 0; b < in.bits.size(); ++b) s[b] += in.pmkvq_k[l][h][b] + in.pmkvq_v[l][h][b];
        p.sensitivity.push_back(s);
      }
    }
    const PmkvqAllocation r = pmkvq_allocate(p);
    for (int l = 0; l < c.n_layer; ++l)
      for (int h = 0; h < c.n_head_kv; ++h)
        for (KvRole role : {KvRole::key, KvRole::value})
          plan.at(l, h, role).bits = r.bits[a.per_head ? (size_t)l * c.n_head_kv + h : (size_t)l];
    plan.solve.method = a.per_head ? "pmkvq-per-head" : "pmkvq";
    plan.solve.objective = r.objective;
    plan.solve.bytes = r.bytes;
    std::printf("pmkvq (%s): objective sum s(b) = %.6g; %.2f MiB of %.2f MiB budget (%lld / %lld bytes); smallest "
                "feasible %.2f MiB\n",
                a.per_head ? "per head" : "per layer", r.objective, r.bytes / 1048576.0, budget / 1048576.0,
                (long long)r.bytes, (long long)budget, r.min_feasible_bytes / 1048576.0);
  } else {
    RateQuantProblem p;
    p.min_bits = cb.front();
    p.max_bits = cb.back();
    p.min_max_quantizer = is_min_max(q);
    // The average bits whose uniform memory is the budget (memory is linear in bits), capped at the top.
    const double b2 = uniform_bytes(layer_spec, c.n_layer, 2), b4 = uniform_bytes(layer_spec, c.n_layer, 4);
    p.avg_bits = std::min<double>(cb.back(), std::max<double>(cb.front(), 2.0 + 2.0 * ((double)budget - b2) / (b4 - b2)));
    if (a.budget_mib <= 0) p.avg_bits = a.avg_bits;
    double wmin = INFINITY;
    for (const auto* t : {&in.w_k, &in.w_v})
      for (const auto& l : *t)
        for (double w : l)
          if (w > 0) wmin = std::min(wmin, w);
    MPKV_CHECK(std::isfinite(wmin), "calibration: every RateQuant weight is zero (no gradient signal)");
    for (int l = 0; l < c.n_layer; ++l)
      for (int h = 0; h < c.n_head_kv; ++h)
        for (int kv = 0; kv < 2; ++kv) {
          RateComponent rc;
          const double w = kv == 0 ? in.w_k[l][h] : in.w_v[l][h];
          rc.weight = w > 0 ? w : wmin * 1e-6;  // a dead head still needs a positive weight
          const ExponentialFit& f = kv == 0 ? in.fit_k : in.fit_v;
          rc.model = {f.alpha, f.beta};
          p.components.push_back(rc);
        }
    RateQuantResult r;
    if (a.method == "combined") {
      const CombinedAllocation ca = combined_allocate(p, c.n_layer, c.n_head_kv);
      r = ca.ratequant;
      plan.progressive = true;
    } else {
      r = ratequant_allocate(p, cb);
    }
    int64_t bytes = 0;
    for (int l = 0; l < c.n_layer; ++l)
      for (int h = 0; h < c.n_head_kv; ++h)
        for (int kv = 0; kv < 2; ++kv) {
          const int b = r.bits[kv_component_index(l, h, kv, c.n_head_kv)];
          plan.at(l, h, kv == 0 ? KvRole::key : KvRole::value).bits = b;
          bytes += kv_component_bytes(head_spec, b);
        }
    plan.solve.method = a.method;
    plan.solve.objective = r.objective;
    plan.solve.bytes = bytes;
    std::printf("%s\n", describe(r).c_str());
    std::printf("%s: predicted gain AM/GM %.4f, achieved objective %.6g (uniform %.6g, gain %.4f); %.2f MiB of %.2f "
                "MiB budget\n",
                a.method.c_str(), r.predicted_gain_am_gm, r.objective, r.objective_uniform, r.achieved_gain,
                bytes / 1048576.0, budget / 1048576.0);
  }
  double sum = 0;
  for (const auto& comp : plan.components) sum += comp.bits;
  plan.solve.avg_bits = sum / (double)plan.components.size();
  plan.provenance = {in.calib_file, in.calib_n, in.calib_len, in.pi_scale, in.smooth,
                     a.report_in.empty() ? a.report_out : a.report_in};
  validate(plan, dims, id);
  write_file_atomic(a.out, kv_plan_to_json(plan));
  std::printf("plan %s: %s, %s%.3f average bits for %lld tokens (budget %.2f MiB), K: %s; V: %s%s\n", a.out.c_str(),
              a.method.c_str(), plan.progressive ? "progressive, " : "", plan.solve.avg_bits, (long long)max_len,
              budget / 1048576.0, bits_histogram(plan, KvRole::key).c_str(), bits_histogram(plan, KvRole::value).c_str(),
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
  sub->add_option("--method", a->method, "pmkvq | ratequant | combined")->required();
  sub->add_option("--avg-bits", a->avg_bits,
                  "average bits (pmkvq: the budget is the memory of every component at B bits for --max-len)");
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
  sub->add_option("--sink", a->sink, "first tokens kept at fp16")->capture_default_str();
  sub->add_flag("--smooth,!--no-smooth", a->smooth, "key smoothing (default on)");
  sub->add_flag("--per-head", a->per_head, "pmkvq: one width per (layer, KV head) instead of per layer");
  sub->add_option("--report-out", a->report_out, "save the calibration report (JSON) for --report-in");
  sub->add_option("--report-in", a->report_in, "reuse a saved calibration report instead of calibrating");
  add_threads_option(sub, a->threads);
  sub->callback([a, sub] { run_calibrate(*a, sub); });
}

}  // namespace mpkv::cli

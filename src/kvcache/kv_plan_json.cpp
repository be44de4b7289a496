// A KV plan's JSON form (kv_plan.h; docs/plan_format.md): writing, reading with every field
// checked (a clear Error naming the field), and loading from a file.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvcache/kv_plan.h"
#include "util/error.h"

namespace mpkv {

namespace {

// Reads {"quantizer", "bits", "group"} into c (fields absent keep their value).
void read_component(const nlohmann::json& j, KvComponentPlan& c, const std::string& where) {
  MPKV_CHECK(j.is_object(), "KV plan: " + where + " must be an object");
  if (j.contains("quantizer")) {
    MPKV_CHECK(j["quantizer"].is_string(), "KV plan: " + where + ": quantizer must be a string");
    const std::string q = j["quantizer"].get<std::string>();
    if (q == "f16") {
      c.fp16 = true;
      c.bits = 16;
    } else {
      c.fp16 = false;
      c.quantizer = parse_method(q);
    }
  }
  if (j.contains("bits")) {
    MPKV_CHECK(j["bits"].is_number_integer(), "KV plan: " + where + ": bits must be an integer");
    c.bits = j["bits"].get<int>();
  }
  if (j.contains("group")) {
    MPKV_CHECK(j["group"].is_number_integer(), "KV plan: " + where + ": group must be an integer");
    c.group = j["group"].get<int>();
  }
  if (j.contains("sensitivity")) {
    MPKV_CHECK(j["sensitivity"].is_object(), "KV plan: " + where + ": sensitivity must be an object {\"bits\": s}");
    c.sensitivity.clear();
    for (const auto& [k, v] : j["sensitivity"].items()) {
      MPKV_CHECK(k.find_first_not_of("0123456789") == std::string::npos && !k.empty() && k.size() <= 2 &&
                     v.is_number(),
                 "KV plan: " + where + ": sensitivity keys must be bit-widths and values numbers");
      c.sensitivity[std::stoi(k)] = v.get<double>();
    }
  }
}

int read_int(const nlohmann::json& j, const char* key, int def) {
  if (!j.contains(key)) return def;
  MPKV_CHECK(j[key].is_number_integer(), std::string("KV plan: '") + key + "' must be an integer");
  return j[key].get<int>();
}

// An optional array of integers (absent: empty).
std::vector<int> read_int_array(const nlohmann::json& j, const char* key) {
  std::vector<int> out;
  if (!j.contains(key)) return out;
  const std::string bad = std::string("KV plan: '") + key + "' must be an array of integers";
  MPKV_CHECK(j[key].is_array(), bad);
  for (const nlohmann::json& x : j[key]) {
    MPKV_CHECK(x.is_number_integer() && x.get<int64_t>() >= INT32_MIN && x.get<int64_t>() <= INT32_MAX, bad);
    out.push_back(x.get<int>());
  }
  return out;
}

double read_double(const nlohmann::json& j, const char* key, double def) {
  if (!j.contains(key)) return def;
  MPKV_CHECK(j[key].is_number(), std::string("KV plan: '") + key + "' must be a number");
  return j[key].get<double>();
}

std::string read_string(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return "";
  MPKV_CHECK(j[key].is_string(), std::string("KV plan: '") + key + "' must be a string");
  return j[key].get<std::string>();
}

// The plan's per-layer sliding windows ("model.sliding_window", optional) must be the model's.
void check_sliding_windows(const nlohmann::json& model_j, const KvDims& md) {
  if (!model_j.contains("sliding_window")) return;
  const nlohmann::json& w = model_j["sliding_window"];
  MPKV_CHECK(w.is_array(), "KV plan: model.sliding_window must be an array of integers (one per layer)");
  std::vector<int> plan_w;
  for (const nlohmann::json& x : w) {
    MPKV_CHECK(x.is_number_integer(), "KV plan: model.sliding_window must be an array of integers (one per layer)");
    plan_w.push_back(x.get<int>());
  }
  std::vector<int> model_w(md.n_layer, 0);
  for (int l = 0; l < md.n_layer; ++l) model_w[l] = md.window_of(l);
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return "[" + s + "]";
  };
  MPKV_CHECK(plan_w == model_w, "KV plan is for a model with sliding windows " + list(plan_w) +
                                    " per layer; this model has " + list(model_w));
}

}  // namespace

std::string kv_plan_to_json(const KvPlan& plan) {
  nlohmann::json j;
  j["format"] = "mpkv-kv-plan";
  j["version"] = kKvPlanVersion;
  j["method"] = kv_plan_method_name(plan.method);
  j["model"] = {{"n_layer", plan.dims.n_layer}, {"n_head_kv", plan.dims.n_head_kv}, {"head_dim", plan.dims.head_dim}};
  if (!plan.dims.window.empty()) j["model"]["sliding_window"] = plan.dims.window;  // per layer, 0 = global
  if (plan.model.known()) {
    j["model"]["arch"] = plan.model.arch;
    j["model"]["tensor_layout_hash"] = format_layout_hash(plan.model.tensor_layout_hash);
  }
  if (plan.solve.solved()) {
    const KvPlanSolve& s = plan.solve;
    j["solve"] = {{"method", solve_method_name(s)},     {"target_avg_bits", s.target_avg_bits}, {"avg_bits", s.avg_bits},
                  {"budget_bytes", s.budget_bytes}, {"bytes", s.bytes},   {"max_len", s.max_len},
                  {"objective", s.objective}};
    const KvPlanProvenance& p = plan.provenance;
    j["provenance"] = {{"calib_file", p.calib_file}, {"calib_n", p.calib_n}, {"calib_len", p.calib_len},
                       {"pi_scale", p.pi_scale},     {"smooth", p.smooth},   {"report", p.report}};
  }
  j["progressive"] = plan.progressive;
  j["window"] = plan.window;
  if (!plan.layer_windows.empty()) j["layer_windows"] = plan.layer_windows;
  j["sink"] = plan.sink;
  j["page_tokens"] = plan.page_tokens;
  nlohmann::json comps = nlohmann::json::array();
  for (int l = 0; l < plan.dims.n_layer; ++l)
    for (int h = 0; h < plan.dims.n_head_kv; ++h)
      for (int r = 0; r < 2; ++r) {
        const KvComponentPlan& c = plan.at(l, h, r == 0 ? KvRole::key : KvRole::value);
        nlohmann::json cj = {{"layer", l}, {"head", h}, {"role", r == 0 ? "key" : "value"},
                             {"quantizer", quantizer_name(c)}, {"bits", c.bits}, {"group", c.group}};
        if (!c.sensitivity.empty()) {
          nlohmann::json sj = nlohmann::json::object();
          for (const auto& [b, v] : c.sensitivity) sj[std::to_string(b)] = v;
          cj["sensitivity"] = sj;
        }
        comps.push_back(cj);
      }
  j["components"] = comps;
  if (!plan.smoothing.empty()) j["smoothing"] = {{"lambda", plan.smoothing}};
  return j.dump(1) + "\n";
}

KvPlan kv_plan_from_json(const std::string& text, const KvDims& md, const KvModelIdentity& model) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(std::string("KV plan: not valid JSON (") + e.what() + ")");
  }
  MPKV_CHECK(j.is_object() && j.value("format", "") == "mpkv-kv-plan",
             "KV plan: missing \"format\": \"mpkv-kv-plan\" (not a KV plan file)");
  MPKV_CHECK(j.contains("version") && j["version"].is_number_integer(), "KV plan: missing integer \"version\"");
  MPKV_CHECK(j["version"].get<int64_t>() == kKvPlanVersion,
             "KV plan: unsupported version " + j["version"].dump() + " (this build reads version " +
                 std::to_string(kKvPlanVersion) + ")");
  MPKV_CHECK(j.contains("model") && j["model"].is_object(), "KV plan: missing \"model\" {n_layer, n_head_kv, head_dim}");
  KvModelIdentity id;
  id.arch = read_string(j["model"], "arch");
  const std::string hash = read_string(j["model"], "tensor_layout_hash");
  if (!hash.empty()) id.tensor_layout_hash = parse_layout_hash(hash);
  check_plan_identity(id, model);  // before the dims: "another model" says more than a dims mismatch
  KvDims d = md;
  d.n_layer = read_int(j["model"], "n_layer", -1);
  d.n_head_kv = read_int(j["model"], "n_head_kv", -1);
  d.head_dim = read_int(j["model"], "head_dim", -1);
  MPKV_CHECK(d.n_layer == md.n_layer && d.n_head_kv == md.n_head_kv && d.head_dim == md.head_dim,
             "KV plan is for a model with " + std::to_string(d.n_layer) + " layers, " + std::to_string(d.n_head_kv) +
                 " KV heads, head_dim " + std::to_string(d.head_dim) + "; this model has " +
                 std::to_string(md.n_layer) + ", " + std::to_string(md.n_head_kv) + ", " + std::to_string(md.head_dim));
  check_sliding_windows(j["model"], md);
  KvComponentPlan def;
  def.fp16 = true;
  if (j.contains("default")) read_component(j["default"], def, "default");
  KvPlan p = uniform_kv_plan(d, def, def);
  p.method = KvPlanMethod::file;
  if (const std::string m = read_string(j, "method"); !m.empty()) p.method = parse_kv_plan_method(m);
  if (j.contains("progressive")) {
    MPKV_CHECK(j["progressive"].is_boolean(), "KV plan: 'progressive' must be true or false");
    p.progressive = j["progressive"].get<bool>();
  }
  p.window = read_int(j, "window", kDefaultKvWindow);
  p.layer_windows = read_int_array(j, "layer_windows");
  p.sink = read_int(j, "sink", kDefaultKvSink);
  p.page_tokens = read_int(j, "page_tokens", kDefaultPageTokens);
  p.model = id;
  if (j.contains("smoothing")) {
    const nlohmann::json& s = j["smoothing"];
    MPKV_CHECK(s.is_object() && s.contains("lambda") && s["lambda"].is_array(),
               "KV plan: 'smoothing' must be an object with a 'lambda' array (one row per layer)");
    for (const nlohmann::json& row : s["lambda"]) {
      MPKV_CHECK(row.is_array(), "KV plan: each smoothing.lambda row must be an array of numbers");
      std::vector<float> r;
      r.reserve(row.size());
      for (const nlohmann::json& x : row) {
        MPKV_CHECK(x.is_number(), "KV plan: smoothing.lambda holds a value that is not a number");
        r.push_back(x.get<float>());
      }
      p.smoothing.push_back(std::move(r));
    }
  }
  if (j.contains("solve")) {
    const nlohmann::json& s = j["solve"];
    MPKV_CHECK(s.is_object(), "KV plan: 'solve' must be an object");
    parse_solve_method(read_string(s, "method"), p.solve);
    p.solve.target_avg_bits = read_double(s, "target_avg_bits", 0);
    p.solve.avg_bits = read_double(s, "avg_bits", 0);
    p.solve.budget_bytes = (int64_t)read_double(s, "budget_bytes", 0);
    p.solve.bytes = (int64_t)read_double(s, "bytes", 0);
    p.solve.max_len = (int64_t)read_double(s, "max_len", 0);
    p.solve.objective = read_double(s, "objective", 0);
  }
  if (j.contains("provenance")) {
    const nlohmann::json& s = j["provenance"];
    MPKV_CHECK(s.is_object(), "KV plan: 'provenance' must be an object");
    p.provenance.calib_file = read_string(s, "calib_file");
    p.provenance.calib_n = read_int(s, "calib_n", 0);
    p.provenance.calib_len = read_int(s, "calib_len", 0);
    p.provenance.pi_scale = read_double(s, "pi_scale", 0);
    if (s.contains("smooth")) {
      MPKV_CHECK(s["smooth"].is_boolean(), "KV plan: provenance.smooth must be true or false");
      p.provenance.smooth = s["smooth"].get<bool>();
    }
    p.provenance.report = read_string(s, "report");
  }
  if (j.contains("components")) {
    MPKV_CHECK(j["components"].is_array(), "KV plan: 'components' must be an array");
    for (size_t i = 0; i < j["components"].size(); ++i) {
      const nlohmann::json& c = j["components"][i];
      const std::string where = "components[" + std::to_string(i) + "]";
      MPKV_CHECK(c.is_object(), "KV plan: " + where + " must be an object");
      const int l = read_int(c, "layer", -1), h = read_int(c, "head", -1);
      MPKV_CHECK(l >= 0 && l < d.n_layer, "KV plan: " + where + ": layer " + std::to_string(l) + " out of range");
      MPKV_CHECK(h >= 0 && h < d.n_head_kv, "KV plan: " + where + ": head " + std::to_string(h) + " out of range");
      MPKV_CHECK(c.contains("role") && c["role"].is_string(), "KV plan: " + where + ": missing role (key|value)");
      read_component(c, p.at(l, h, parse_role(c["role"].get<std::string>())), where);
    }
  }
  validate(p, md, model);
  return p;
}

KvPlan load_kv_plan(const std::string& path, const KvDims& md, const KvModelIdentity& model) {
  std::ifstream f(path, std::ios::binary);
  MPKV_CHECK(f.good(), "cannot read KV plan file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return kv_plan_from_json(ss.str(), md, model);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace mpkv

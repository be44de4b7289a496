#include "kvcache/kv_plan.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace mpkv {

namespace {

std::string component_name(int layer, int head, int role) {
  return "layer " + std::to_string(layer) + " head " + std::to_string(head) + (role == 0 ? " key" : " value");
}

bool on_shrink_ladder(int bits) { return bits == 16 || bits == 8 || bits == 4 || bits == 2 || bits == 1; }

std::string quantizer_name(const KvComponentPlan& c) { return c.fp16 ? "f16" : method_name(c.quantizer); }

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

// Progressive shrink costs: s(b) finite for every width from 16 down to the final bits.
void check_shrink_costs(const KvComponentPlan& c, const std::string& who) {
  for (int b = 16; b >= c.bits; b /= 2) {
    const auto it = c.sensitivity.find(b);
    MPKV_CHECK(it != c.sensitivity.end() && std::isfinite(it->second),
               who + "sensitivity must give a finite s(" + std::to_string(b) +
                   ") for every width of the ladder down to the final bits");
    if (b == 1) break;
  }
}

int read_int(const nlohmann::json& j, const char* key, int def) {
  if (!j.contains(key)) return def;
  MPKV_CHECK(j[key].is_number_integer(), std::string("KV plan: '") + key + "' must be an integer");
  return j[key].get<int>();
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

std::string describe_identity(const KvModelIdentity& m) {
  return (m.arch.empty() ? std::string("?") : m.arch) + ", tensor layout " + format_layout_hash(m.tensor_layout_hash);
}

void check_identity(const KvModelIdentity& plan, const KvModelIdentity& model) {
  if (!plan.known() || !model.known()) return;
  MPKV_CHECK(plan.arch == model.arch && plan.tensor_layout_hash == model.tensor_layout_hash,
             "KV plan is for another model (" + describe_identity(plan) + "); this model is " +
                 describe_identity(model) + ". Calibrate a plan for this model with `mpkv calibrate`");
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

std::string format_layout_hash(uint64_t h) {
  char b[32];
  std::snprintf(b, sizeof b, "fnv1a64:%016" PRIx64, h);
  return b;
}

uint64_t parse_layout_hash(const std::string& s) {
  const std::string prefix = "fnv1a64:";
  MPKV_CHECK(s.size() == prefix.size() + 16 && s.compare(0, prefix.size(), prefix) == 0 &&
                 s.find_first_not_of("0123456789abcdef", prefix.size()) == std::string::npos,
             "KV plan: tensor_layout_hash '" + s + "' is not of the form fnv1a64:<16 lowercase hex digits>");
  return std::stoull(s.substr(prefix.size()), nullptr, 16);
}

std::string solve_method_name(const KvPlanSolve& s) {
  std::string n = kv_plan_method_name(s.method);
  if (s.per_head) n += "-per-head";
  if (s.progressive) n += "-progressive";
  if (s.direct) n += "-direct";
  return n;
}

void parse_solve_method(const std::string& name, KvPlanSolve& s) {
  std::string n = name;
  const auto strip = [&n](const std::string& suffix) {
    const bool has = n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (has) n.resize(n.size() - suffix.size());
    return has;
  };
  s.direct = strip("-direct");
  s.progressive = strip("-progressive");
  s.per_head = strip("-per-head");
  s.method = n.empty() ? KvPlanMethod::file : parse_kv_plan_method(n);
}

bool has_shrink_costs(const KvPlan& plan) {
  for (const KvComponentPlan& c : plan.components)
    if (!c.sensitivity.empty()) return true;
  return false;
}

KvPlan uniform_kv_plan(const KvDims& dims, const KvComponentPlan& key, const KvComponentPlan& value) {
  KvPlan p;
  p.dims = dims;
  p.components.resize((size_t)dims.n_layer * dims.n_head_kv * 2);
  for (size_t i = 0; i < p.components.size(); ++i) p.components[i] = i % 2 == 0 ? key : value;
  return p;
}

QuantOptions component_quant_options(const KvPlan& plan, const KvComponentPlan& c, KvRole role, int bits) {
  QuantOptions o;
  o.method = c.quantizer;
  o.role = role;
  o.bits = bits;
  o.head_dim = plan.dims.head_dim;
  o.group = c.group;
  return o;
}

int component_token_granularity(const KvPlan& plan, const KvComponentPlan& c, KvRole role) {
  if (c.fp16) return 1;
  const QuantOptions o = component_quant_options(plan, c, role, c.bits);
  return groups_along_tokens(o) ? effective_group(o) : 1;
}

void validate(const KvPlan& plan, const KvDims& md, const KvModelIdentity& model) {
  const KvDims& d = plan.dims;
  check_identity(plan.model, model);
  MPKV_CHECK(d.n_layer == md.n_layer && d.n_head_kv == md.n_head_kv && d.head_dim == md.head_dim,
             "KV plan is for a model with " + std::to_string(d.n_layer) + " layers, " + std::to_string(d.n_head_kv) +
                 " KV heads, head_dim " + std::to_string(d.head_dim) + "; this model has " +
                 std::to_string(md.n_layer) + ", " + std::to_string(md.n_head_kv) + ", " + std::to_string(md.head_dim));
  MPKV_CHECK(plan.components.size() == (size_t)d.n_layer * d.n_head_kv * 2,
             "KV plan: " + std::to_string(plan.components.size()) + " components, expected n_layer * n_head_kv * 2 = " +
                 std::to_string((size_t)d.n_layer * d.n_head_kv * 2));
  MPKV_CHECK(plan.window >= 0 && plan.window <= (1 << 20), "KV plan: window " + std::to_string(plan.window) +
                                                             " outside [0, 2^20]");
  MPKV_CHECK(plan.sink >= 0 && plan.sink <= (1 << 20), "KV plan: sink " + std::to_string(plan.sink) + " outside [0, 2^20]");
  MPKV_CHECK(plan.page_tokens >= 1 && plan.page_tokens <= (1 << 16),
             "KV plan: page_tokens " + std::to_string(plan.page_tokens) + " outside [1, 65536]");
  if (!plan.smoothing.empty()) {
    MPKV_CHECK((int)plan.smoothing.size() == d.n_layer, "KV plan: smoothing.lambda has " +
                                                            std::to_string(plan.smoothing.size()) + " layers, expected " +
                                                            std::to_string(d.n_layer));
    for (int l = 0; l < d.n_layer; ++l) {
      MPKV_CHECK((int)plan.smoothing[l].size() == d.n_head_kv * d.head_dim,
                 "KV plan: smoothing.lambda[" + std::to_string(l) + "] has " + std::to_string(plan.smoothing[l].size()) +
                     " scales, expected n_head_kv * head_dim = " + std::to_string(d.n_head_kv * d.head_dim));
      for (float x : plan.smoothing[l])
        MPKV_CHECK(std::isfinite(x) && x > 0.0f,
                   "KV plan: smoothing.lambda[" + std::to_string(l) + "] holds a scale that is not finite and > 0");
    }
  }
  const bool costs = has_shrink_costs(plan);
  for (int l = 0; l < d.n_layer; ++l) {
    for (int h = 0; h < d.n_head_kv; ++h) {
      for (int r = 0; r < 2; ++r) {
        const KvRole role = r == 0 ? KvRole::key : KvRole::value;
        const KvComponentPlan& c = plan.at(l, h, role);
        const std::string who = "KV plan, " + component_name(l, h, r) + " (" + quantizer_name(c) + "): ";
        if (c.fp16) {
          MPKV_CHECK(c.bits == 16, who + "f16 storage has 16 bits, got " + std::to_string(c.bits));
          continue;
        }
        try {
          validate(component_quant_options(plan, c, role, c.bits));
        } catch (const Error& e) {
          throw Error(who + e.what());
        }
        if (plan.progressive) {
          MPKV_CHECK(c.quantizer != QuantMethod::turbo,
                     who + "progressive plans need min-max codes (turbo's Lloyd-Max codes cannot be shrunk)");
          MPKV_CHECK(on_shrink_ladder(c.bits), who + "progressive final bits must be 16, 8, 4, 2 or 1 (the shrink "
                                                     "ladder), got " + std::to_string(c.bits));
          validate(component_quant_options(plan, c, role, 16));
          if (costs) check_shrink_costs(c, who);
        }
        const int g = component_token_granularity(plan, c, role);
        MPKV_CHECK(plan.page_tokens % g == 0, who + "token group " + std::to_string(g) +
                                                  " does not divide page_tokens " + std::to_string(plan.page_tokens));
      }
    }
  }
}

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
  check_identity(id, model);  // before the dims: "another model" says more than a dims mismatch
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

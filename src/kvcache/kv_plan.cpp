#include "kvcache/kv_plan.h"

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
}

int read_int(const nlohmann::json& j, const char* key, int def) {
  if (!j.contains(key)) return def;
  MPKV_CHECK(j[key].is_number_integer(), std::string("KV plan: '") + key + "' must be an integer");
  return j[key].get<int>();
}

}  // namespace

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

void validate(const KvPlan& plan, const KvDims& md) {
  const KvDims& d = plan.dims;
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
  j["method"] = plan.method;
  j["model"] = {{"n_layer", plan.dims.n_layer}, {"n_head_kv", plan.dims.n_head_kv}, {"head_dim", plan.dims.head_dim}};
  j["progressive"] = plan.progressive;
  j["window"] = plan.window;
  j["sink"] = plan.sink;
  j["page_tokens"] = plan.page_tokens;
  nlohmann::json comps = nlohmann::json::array();
  for (int l = 0; l < plan.dims.n_layer; ++l)
    for (int h = 0; h < plan.dims.n_head_kv; ++h)
      for (int r = 0; r < 2; ++r) {
        const KvComponentPlan& c = plan.at(l, h, r == 0 ? KvRole::key : KvRole::value);
        comps.push_back({{"layer", l}, {"head", h}, {"role", r == 0 ? "key" : "value"},
                         {"quantizer", quantizer_name(c)}, {"bits", c.bits}, {"group", c.group}});
      }
  j["components"] = comps;
  return j.dump(1) + "\n";
}

KvPlan kv_plan_from_json(const std::string& text, const KvDims& md) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(std::string("KV plan: not valid JSON (") + e.what() + ")");
  }
  MPKV_CHECK(j.is_object() && j.value("format", "") == "mpkv-kv-plan",
             "KV plan: missing \"format\": \"mpkv-kv-plan\" (not a KV plan file)");
  MPKV_CHECK(j.contains("version") && j["version"].is_number_integer() && j["version"].get<int>() == kKvPlanVersion,
             "KV plan: unsupported version (this build reads version " + std::to_string(kKvPlanVersion) + ")");
  MPKV_CHECK(j.contains("model") && j["model"].is_object(), "KV plan: missing \"model\" {n_layer, n_head_kv, head_dim}");
  KvDims d = md;
  d.n_layer = read_int(j["model"], "n_layer", -1);
  d.n_head_kv = read_int(j["model"], "n_head_kv", -1);
  d.head_dim = read_int(j["model"], "head_dim", -1);
  MPKV_CHECK(d.n_layer == md.n_layer && d.n_head_kv == md.n_head_kv && d.head_dim == md.head_dim,
             "KV plan is for a model with " + std::to_string(d.n_layer) + " layers, " + std::to_string(d.n_head_kv) +
                 " KV heads, head_dim " + std::to_string(d.head_dim) + "; this model has " +
                 std::to_string(md.n_layer) + ", " + std::to_string(md.n_head_kv) + ", " + std::to_string(md.head_dim));
  KvComponentPlan def;
  def.fp16 = true;
  if (j.contains("default")) read_component(j["default"], def, "default");
  KvPlan p = uniform_kv_plan(d, def, def);
  p.method = j.contains("method") && j["method"].is_string() ? j["method"].get<std::string>() : "file";
  if (j.contains("progressive")) {
    MPKV_CHECK(j["progressive"].is_boolean(), "KV plan: 'progressive' must be true or false");
    p.progressive = j["progressive"].get<bool>();
  }
  p.window = read_int(j, "window", kDefaultKvWindow);
  p.sink = read_int(j, "sink", kDefaultKvSink);
  p.page_tokens = read_int(j, "page_tokens", kDefaultPageTokens);
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
  validate(p, md);
  return p;
}

KvPlan load_kv_plan(const std::string& path, const KvDims& md) {
  std::ifstream f(path, std::ios::binary);
  MPKV_CHECK(f.good(), "cannot read KV plan file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return kv_plan_from_json(ss.str(), md);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace mpkv

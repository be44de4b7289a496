#include "kvcache/kv_plan.h"

#include <algorithm>
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




std::string describe_identity(const KvModelIdentity& m) {
  return (m.arch.empty() ? std::string("?") : m.arch) + ", tensor layout " + format_layout_hash(m.tensor_layout_hash);
}

}  // namespace

std::string quantizer_name(const KvComponentPlan& c) { return c.fp16 ? "f16" : method_name(c.quantizer); }

void check_plan_identity(const KvModelIdentity& plan, const KvModelIdentity& model) {
  if (!plan.known() || !model.known()) return;
  MPKV_CHECK(plan.arch == model.arch && plan.tensor_layout_hash == model.tensor_layout_hash,
             "KV plan is for another model (" + describe_identity(plan) + "); this model is " +
                 describe_identity(model) + ". Calibrate a plan for this model with `mpkv calibrate`");
}

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

int KvPlan::min_fp16_window() const {
  return layer_windows.empty() ? window : *std::min_element(layer_windows.begin(), layer_windows.end());
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
  check_plan_identity(plan.model, model);
  MPKV_CHECK(d.n_layer == md.n_layer && d.n_head_kv == md.n_head_kv && d.head_dim == md.head_dim,
             "KV plan is for a model with " + std::to_string(d.n_layer) + " layers, " + std::to_string(d.n_head_kv) +
                 " KV heads, head_dim " + std::to_string(d.head_dim) + "; this model has " +
                 std::to_string(md.n_layer) + ", " + std::to_string(md.n_head_kv) + ", " + std::to_string(md.head_dim));
  MPKV_CHECK(plan.components.size() == (size_t)d.n_layer * d.n_head_kv * 2,
             "KV plan: " + std::to_string(plan.components.size()) + " components, expected n_layer * n_head_kv * 2 = " +
                 std::to_string((size_t)d.n_layer * d.n_head_kv * 2));
  MPKV_CHECK(plan.window >= 0 && plan.window <= (1 << 20), "KV plan: window " + std::to_string(plan.window) +
                                                             " outside [0, 2^20]");
  MPKV_CHECK(plan.layer_windows.empty() || (int)plan.layer_windows.size() == d.n_layer,
             "KV plan: layer_windows has " + std::to_string(plan.layer_windows.size()) +
                 " entries, expected one per layer (" + std::to_string(d.n_layer) + ")");
  for (size_t l = 0; l < plan.layer_windows.size(); ++l)
    MPKV_CHECK(plan.layer_windows[l] >= 0 && plan.layer_windows[l] <= (1 << 20),
               "KV plan: layer_windows[" + std::to_string(l) + "] = " + std::to_string(plan.layer_windows[l]) +
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


}  // namespace mpkv

// The KV plan: how every KV component (layer, KV head, K|V) is stored. It is the only thing the
// runtime reads (DESIGN.md "Plan, then run"); a command line (--kv-method, --kv-bits ...) builds
// one in kv_cache_factory, a plan file (--kv-plan) gives one directly, and the calibration issue
// writes richer ones (it may add fields; readers ignore unknown keys).
//
// Plan file (versioned JSON, small by design: a default plus per-component overrides):
//   {
//     "format": "mpkv-kv-plan", "version": 1,
//     "model": {"n_layer": 30, "n_head_kv": 3, "head_dim": 64},   // checked against the model
//     "progressive": true,        // pages start at 16 bits and shrink toward "bits" under the budget
//     "window": 128, "sink": 1, "page_tokens": 64,                // optional (defaults below)
//     "default": {"quantizer": "uniform", "bits": 2, "group": 0}, // every component not overridden
//     "components": [ {"layer": 3, "head": 1, "role": "key", "quantizer": "uniform", "bits": 4}, ... ]
//   }
// "quantizer": "f16" (raw fp16 pages, bits must be 16) | "uniform" | "kivi" | "rotated" | "turbo";
// "group": 0 = the quantizer's default (quant_options.h); "bits" = the FINAL bits of the component.
#pragma once
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "quant/quant_options.h"

namespace mpkv {

// One KV component's storage.
struct KvComponentPlan {
  bool fp16 = false;                           // raw fp16 rows (the 16-bit reference path)
  QuantMethod quantizer = QuantMethod::uniform;  // ignored when fp16
  int bits = 16;                               // final bits (16 when fp16)
  int group = 0;                               // 0 = quantizer default
};

inline constexpr int kKvPlanVersion = 1;
inline constexpr int kDefaultKvWindow = 128;  // recent tokens kept at fp16 (ALGORITHMS.md 3)
inline constexpr int kDefaultKvSink = 1;      // first tokens kept at fp16
inline constexpr int kDefaultPageTokens = 64;

struct KvPlan {
  std::string method = "f16";  // what built it: f16, uniform, kivi, rotated, turbo, progressive, file
  bool progressive = false;    // pages start at 16-bit uniform codes and shrink toward `bits`
  KvDims dims;                 // n_layer, n_head_kv, head_dim of the model (n_head unused)
  int window = kDefaultKvWindow;
  int sink = kDefaultKvSink;
  int page_tokens = kDefaultPageTokens;  // P: tokens per page, a multiple of every token group
  // [n_layer][n_head_kv][2] row-major; index 0 = key, 1 = value.
  std::vector<KvComponentPlan> components;

  KvComponentPlan& at(int layer, int head, KvRole role) {
    return components[((size_t)layer * dims.n_head_kv + head) * 2 + (role == KvRole::key ? 0 : 1)];
  }
  const KvComponentPlan& at(int layer, int head, KvRole role) const {
    return components[((size_t)layer * dims.n_head_kv + head) * 2 + (role == KvRole::key ? 0 : 1)];
  }
};

// A plan with every component equal to `c`.
KvPlan uniform_kv_plan(const KvDims& dims, const KvComponentPlan& key, const KvComponentPlan& value);

// The quantizer options of one (non-fp16) component at `bits` (the final bits, or 16 while progressive).
QuantOptions component_quant_options(const KvPlan& plan, const KvComponentPlan& c, KvRole role, int bits);
// Tokens a flush must move at once for this component: the key token group for KIVI, else 1.
int component_token_granularity(const KvPlan& plan, const KvComponentPlan& c, KvRole role);

// Throws Error naming the bad field unless the plan can run on a model with these dims:
// matching dims, component count, window/sink >= 0, page_tokens a multiple of every token group,
// quantizer options valid (quant_options.h), progressive plans only with shrinkable quantizers and
// final bits on the 16 -> 8 -> 4 -> 2 -> 1 ladder.
void validate(const KvPlan& plan, const KvDims& model_dims);

// JSON text of the plan (every component written out) and back. parse throws Error on malformed
// JSON, another format / version, or a plan for other dims; it validates before returning.
std::string kv_plan_to_json(const KvPlan& plan);
KvPlan kv_plan_from_json(const std::string& text, const KvDims& model_dims);
KvPlan load_kv_plan(const std::string& path, const KvDims& model_dims);

}  // namespace mpkv

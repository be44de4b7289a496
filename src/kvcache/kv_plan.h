// The KV plan: how every KV component (layer, KV head, K|V) is stored. It is the only thing the
// runtime reads (docs/design.md "Plan, then run"); a command line (--kv-method, --kv-bits ...) builds
// one in kv_cache_factory, a plan file (--kv-plan) gives one directly, and `mpkv calibrate` writes
// richer ones (docs/plan_format.md; readers ignore unknown keys).
//
// Plan file (versioned JSON, small by design: a default plus per-component overrides):
//   {
//     "format": "mpkv-kv-plan", "version": 1,
//     "model": {"n_layer": 30, "n_head_kv": 3, "head_dim": 64},   // checked against the model
//     "progressive": true,        // pages start at 16 bits and shrink toward "bits" under the budget
//     "window": 128, "sink": 1, "page_tokens": 64,                // optional (defaults below)
//     "layer_windows": [128, 32, ...],  // optional: each layer's fp16 window (n_layer entries)
//     "default": {"quantizer": "uniform", "bits": 2, "group": 0}, // every component not overridden
//     "components": [ {"layer": 3, "head": 1, "role": "key", "quantizer": "uniform", "bits": 4}, ... ]
//   }
// "quantizer": "f16" (raw fp16 pages, bits must be 16) | "uniform" | "kivi" | "rotated" | "turbo";
// "group": 0 = the quantizer's default (quant_options.h); "bits" = the FINAL bits of the component.
// Calibrated plans (`mpkv calibrate`) add, all optional (docs/plan_format.md):
//   "model": {..., "arch": "llama", "tensor_layout_hash": "fnv1a64:0123abcd..."}  // checked on load
//   "smoothing": {"lambda": [[...n_head_kv * head_dim...] per layer]}  // q *= lambda, k /= lambda
//   "solve": {"method", "avg_bits", "target_avg_bits", "budget_bytes", "max_len", "objective", ...}
//   "provenance": {"calib_file", "calib_n", "calib_len", "pi_scale", "report"}
//   components[i].sensitivity: {"16": s16, "8": s8, ...}  // progressive shrink costs (KvComponentPlan)
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvcache/kv_method.h"
#include "model/kv_cache.h"
#include "quant/quant_options.h"

namespace mpkv {

// One KV component's storage.
struct KvComponentPlan {
  bool fp16 = false;                           // raw fp16 rows (the 16-bit reference path)
  QuantMethod quantizer = QuantMethod::uniform;  // ignored when fp16
  int bits = 16;                               // final bits (16 when fp16)
  int group = 0;                               // 0 = quantizer default
  // Progressive plans from `mpkv calibrate`: the component's sensitivity s(b) at every width of its
  // ladder (16, 8, ... down to bits; docs/calibration.md). The cache shrinks the page whose next
  // halving costs the least sensitivity per byte freed. Empty: no costs (most bits first, oldest first).
  std::map<int, double> sensitivity;
};

// Which model a plan belongs to beyond its dims: the architecture and a hash of the tensor layout
// (tensor_layout_hash below). Empty arch / zero hash: unknown, not checked (hand-written plans).
struct KvModelIdentity {
  std::string arch;
  uint64_t tensor_layout_hash = 0;
  bool known() const { return !arch.empty() || tensor_layout_hash != 0; }
};

// FNV-1a 64 over every tensor's name, ggml type and dims, in file order: two GGUFs with the same
// architecture and shapes but other tensors / quantization types get different hashes. `Tensor` is
// any type with .name (string), .type (enum or integer) and .dims (integers), e.g. GgufTensorInfo.
inline uint64_t fnv1a64(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
template <class Tensors>
uint64_t tensor_layout_hash(const Tensors& tensors) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& t : tensors) {
    h = fnv1a64(h, t.name.data(), t.name.size());
    const uint8_t sep = 0;
    h = fnv1a64(h, &sep, 1);
    const int64_t type = (int64_t)t.type, nd = (int64_t)t.dims.size();
    h = fnv1a64(h, &type, sizeof type);
    h = fnv1a64(h, &nd, sizeof nd);
    for (auto d : t.dims) {
      const int64_t v = (int64_t)d;
      h = fnv1a64(h, &v, sizeof v);
    }
  }
  return h;
}
// "fnv1a64:" + 16 hex digits, and back (Error on another form).
std::string format_layout_hash(uint64_t h);
uint64_t parse_layout_hash(const std::string& s);

// What a calibrated plan was solved for (method file: a hand-written plan, not written out).
struct KvPlanSolve {
  KvPlanMethod method = KvPlanMethod::file;  // pmkvq | ratequant | combined | fixed
  double target_avg_bits = 0;  // --avg-bits asked (0 when a byte budget was given)
  double avg_bits = 0;         // mean final bits over the n_layer * n_head_kv * 2 components
  int64_t budget_bytes = 0;    // the byte budget for max_len tokens of one sequence (0: none)
  int64_t bytes = 0;           // KvByteModel::sequence_bytes_bound(max_len) of this plan (<= budget_bytes)
  int64_t max_len = 0;
  double objective = 0;        // the allocator's objective at the chosen bits
  bool per_head = false;       // pmkvq over (layer, KV head) blocks instead of layers
  bool progressive = false;    // fixed, with pages starting at 16 bits (--progressive)
  bool direct = false;         // ablation: the finals quantized directly (--direct)
  bool solved() const { return method != KvPlanMethod::file; }
};
// The "solve.method" of a plan file: the method, then -per-head / -progressive, then -direct
// (e.g. "pmkvq-per-head", "combined-direct", "fixed-progressive"); and back (Error on another name).
std::string solve_method_name(const KvPlanSolve& s);
void parse_solve_method(const std::string& name, KvPlanSolve& s);

// Where the calibration came from (informational).
struct KvPlanProvenance {
  std::string calib_file;
  int calib_n = 0, calib_len = 0;
  double pi_scale = 0;
  bool smooth = false;
  std::string report;  // calibration report file it was read from / written to ("" = none)
};

inline constexpr int kKvPlanVersion = 1;
inline constexpr int kDefaultKvWindow = 128;  // recent tokens kept at fp16 (docs/algorithms.md §3)
inline constexpr int kDefaultKvSink = 1;      // first tokens kept at fp16
inline constexpr int kDefaultPageTokens = 64;

struct KvPlan {
  KvPlanMethod method = KvPlanMethod::f16;  // what built it (kv_method.h)
  bool progressive = false;    // pages start at 16-bit uniform codes and shrink toward `bits`
  KvDims dims;                 // n_layer, n_head_kv, head_dim of the model (n_head unused)
  int window = kDefaultKvWindow;  // recent tokens kept at fp16, every layer without its own
  // Per-layer fp16 windows [n_layer], overriding `window` (docs/plan_format.md). Empty: every
  // layer keeps `window`. The sink stays one value for all layers: prefix blocks (prefix_index.h)
  // cover the same positions [S + jP, S + (j+1)P) in every layer.
  std::vector<int> layer_windows;
  int sink = kDefaultKvSink;
  int page_tokens = kDefaultPageTokens;  // P: tokens per page, a multiple of every token group
  // [n_layer][n_head_kv][2] row-major; index 0 = key, 1 = value.
  std::vector<KvComponentPlan> components;
  KvModelIdentity model;  // checked against the model on load when known
  // Key smoothing scales [n_layer][n_head_kv * head_dim] (smoothing.h): the forward pass multiplies
  // q by them and divides k before RoPE (Forward::set_qk_smoothing). Empty: no smoothing.
  std::vector<std::vector<float>> smoothing;
  KvPlanSolve solve;
  KvPlanProvenance provenance;

  // The fp16 window of `layer`: its layer_windows entry, else `window`.
  int fp16_window(int layer) const { return layer_windows.empty() ? window : layer_windows[(size_t)layer]; }
  // The smallest fp16 window over the layers (a context no longer than sink + this quantizes nothing).
  int min_fp16_window() const;

  KvComponentPlan& at(int layer, int head, KvRole role) {
    return components[((size_t)layer * dims.n_head_kv + head) * 2 + (role == KvRole::key ? 0 : 1)];
  }
  const KvComponentPlan& at(int layer, int head, KvRole role) const {
    return components[((size_t)layer * dims.n_head_kv + head) * 2 + (role == KvRole::key ? 0 : 1)];
  }
};

// True when some component carries shrink costs (sensitivity); validate() then requires them of
// every quantized component of a progressive plan.
bool has_shrink_costs(const KvPlan& plan);

// A plan with every component equal to `c`.
KvPlan uniform_kv_plan(const KvDims& dims, const KvComponentPlan& key, const KvComponentPlan& value);

// The quantizer options of one (non-fp16) component at `bits` (the final bits, or 16 while progressive).
QuantOptions component_quant_options(const KvPlan& plan, const KvComponentPlan& c, KvRole role, int bits);
// Tokens a flush must move at once for this component: the key token group for KIVI, else 1.
int component_token_granularity(const KvPlan& plan, const KvComponentPlan& c, KvRole role);

// Throws Error naming the bad field unless the plan can run on a model with these dims (and, when
// both the plan's and `model` identities are known, that identity: same arch and layout hash):
// matching dims, component count, window/sink >= 0, page_tokens a multiple of every token group,
// quantizer options valid (quant_options.h), progressive plans only with shrinkable quantizers and
// final bits on the 16 -> 8 -> 4 -> 2 -> 1 ladder.
void validate(const KvPlan& plan, const KvDims& model_dims, const KvModelIdentity& model = {});
// Error unless a plan made for `plan` identity may run on `model` (unknown identities pass).
void check_plan_identity(const KvModelIdentity& plan, const KvModelIdentity& model);
// A component's quantizer as the plan names it ("f16" for fp16 components).
std::string quantizer_name(const KvComponentPlan& c);

// JSON text of the plan (every component written out) and back. parse throws Error on malformed
// JSON, another format / version, or a plan for other dims; it validates before returning.
std::string kv_plan_to_json(const KvPlan& plan);
KvPlan kv_plan_from_json(const std::string& text, const KvDims& model_dims, const KvModelIdentity& model = {});
KvPlan load_kv_plan(const std::string& path, const KvDims& model_dims, const KvModelIdentity& model = {});

}  // namespace mpkv

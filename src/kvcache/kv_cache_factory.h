// The one place that turns KV options (command line or code) into a plan and a cache, so ppl,
// generate, bench and eval build caches the same way. Everything is validated before any work.
//
// Methods (all become a KvPlan, kv_plan.h):
//   f16          fp16 pages (the 16-bit reference path); sink and window default to 0
//   uniform      per-token min-max codes at --kv-bits (group: --kv-group channels, default head_dim)
//   kivi         keys per-channel over groups of --kv-group tokens (default 32), values per-token
//                over groups of --kv-group channels (default head_dim)
//   rotated      Walsh-Hadamard rotation, then uniform
//   turbo        random-sign Hadamard + Lloyd-Max codes (1-4 bits)
//   progressive  PM-KVQ: uniform pages start at 16 bits and shrink toward --kv-bits under the budget
// --kv-k-bits / --kv-v-bits override --kv-bits for keys / values. --kv-plan FILE replaces the
// method, bits and group (window / sink given explicitly still override the file); its smoothing
// scales travel in cache->plan().smoothing, which engine/ModelRunner hands to Forward::set_qk_smoothing.
#pragma once
#include <memory>
#include <string>

#include "kvcache/kv_method.h"
#include "kvcache/kv_plan.h"
#include "kvcache/paged_kv_cache.h"

namespace mpkv {

struct KvCacheOptions {
  KvMethod method = KvMethod::f16;  // parsed from its name where it enters (kv_method.h)
  int bits = 4;              // final bits of keys and values
  int k_bits = 0, v_bits = 0;  // 0: bits
  int group = 0;             // 0: the quantizer's default
  int window = -1, sink = -1;  // -1: the method's default (f16: 0 and 0; else 128 and 1)
  double budget_mib = 0;     // 0: unlimited (a progressive plan file: the budget it was solved for)
  std::string plan_file;
  int page_tokens = 0;       // 0: 64, raised to a multiple of the KIVI token group when needed
  KvModelIdentity model;     // the model's identity: a --kv-plan for another model is an Error (unset: unchecked)
};

// The identity a plan is checked against (kv_plan.h): arch and tensor layout hash of a loaded Model
// (a template so this header needs neither model/ nor gguf/).
template <class M>
KvModelIdentity kv_model_identity(const M& model) {
  return {model.config().arch_name, tensor_layout_hash(model.gguf().tensors())};
}

// Field checks that need no model (bits, budget, window...); throws Error.
void validate(const KvCacheOptions& o);
// The plan for a model with these dims (validated; reads plan_file when set).
KvPlan make_kv_plan(const KvCacheOptions& o, const KvDims& dims);
// The cache; Error when the options are invalid or the budget cannot hold even one sequence with
// one page per layer.
std::unique_ptr<PagedKvCache> make_kv_cache(const KvCacheOptions& o, const KvDims& dims);
// One line, e.g. "kivi K2/V2 group 32, window 128, sink 1, pages of 64, budget 64 MiB".
std::string describe(const KvCacheOptions& o);

}  // namespace mpkv

// Does the distortion model predict what happens? (docs/calibration.md "Prediction
// check"). From a fixed-width base plan, every listed component (layer, KV head, K|V) is dropped
// alone to a lower width; each variant runs one teacher-forced pass per text window through a
// RuntimeFakeQuantKvCache (quantized exactly where the runtime quantizes), and its KL against the
// 16-bit reference is measured at the scored positions [n_ctx/2, n_ctx-1) (`mpkv ppl` windows).
// The caller ranks those measured increases against its predictions (spearman()).
#pragma once
#include <cstdint>
#include <vector>

#include "kvcache/kv_plan.h"
#include "model/model.h"

namespace mpkv {

struct DropComponent {
  int layer = 0, head = 0;
  KvRole role = KvRole::key;
};

struct SingleDropOptions {
  int n_ctx = 512;
  int windows = 1;
  bool add_bos = false;
  int32_t bos = -1;
  bool progress = true;
};

struct SingleDropResult {
  double kl_base = 0;                // mean KL(f16 || base plan)
  std::vector<double> kl;            // [component] mean KL(f16 || base with that component dropped)
  std::vector<double> kl_from_base;  // [component] mean KL(base || dropped)
  int64_t scored = 0;                // positions per variant
  double seconds = 0;
};

// Error when the text is too short, the base plan is progressive, or a component's width cannot
// be lowered to drop_bits with its quantizer.
SingleDropResult measure_single_drops(const Model& model, const std::vector<int32_t>& tokens, const KvPlan& base,
                                      const std::vector<DropComponent>& components, int drop_bits,
                                      const SingleDropOptions& o);

// Spearman rank correlation (average ranks for ties); Error unless sizes match and n >= 2.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace mpkv

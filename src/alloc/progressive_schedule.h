// mpkv's combined method: RateQuant decides each (layer, KV head, K|V) component's FINAL bits, and
// PM-KVQ's progressive quantization reaches them from 16 bits (docs/algorithms.md §2, §3, §6).
//
// The ladder is the equivalent right shift, which halves a min-max code's width in place:
// 16 -> 8 -> 4 -> 2, stopping at the final bits. A final width of 3 (or 5, 6, 7) is not on that
// ladder: 4 -> 3 is no halving shift, and the step would need a dequantize-requantize pass with
// its own rounding error on top of the shifts'. Decision: combined finals are restricted to ladder
// widths, {2, 4, 8} (and 16 when max_bits allows it), chosen by RateQuant's exact gapped knapsack,
// never by rounding a contiguous allocation.
//
// When a component steps down its ladder (memory pressure) is the KV cache's shrink policy; this
// file only describes where each component starts, which widths it passes and where it stops.
#pragma once
#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "alloc/ratequant_allocator.h"

namespace mpkv {

// Order of every per-(layer, KV head, K|V) table in alloc: kv = 0 for keys, 1 for values.
//   index = (layer * n_kv_heads + head) * 2 + kv
inline size_t kv_component_index(int layer, int head, int kv, int n_kv_heads) {
  return ((size_t)layer * n_kv_heads + head) * 2 + kv;
}

// Widths the equivalent shift passes through, from the top: 16, 8, 4, 2.
inline constexpr int kProgressiveStartBits = 16;
inline constexpr int kProgressiveLowestBits = 2;

struct ProgressiveComponent {
  int layer = 0;
  int head = 0;
  int kv = 0;                // 0 = K, 1 = V
  int final_bits = 16;
  std::vector<int> ladder;   // 16, 8, ..., final_bits (each the previous halved)
};

struct ProgressiveSchedule {
  int n_layers = 0;
  int n_kv_heads = 0;
  int start_bits = kProgressiveStartBits;
  std::vector<ProgressiveComponent> components;  // [n_layers * n_kv_heads * 2], kv_component_index order
};

// True for 16, 8, 4, 2: widths reached from 16 by halving shifts.
bool is_ladder_bits(int bits);

// final_bits: [n_layers * n_kv_heads * 2] in kv_component_index order. Error on a size mismatch or a
// final width off the ladder (the message names it and the allowed {2, 4, 8, 16}).
ProgressiveSchedule progressive_schedule(int n_layers, int n_kv_heads, const std::vector<int>& final_bits);

struct CombinedAllocation {
  RateQuantResult ratequant;     // solved over the ladder widths in [min_bits, max_bits] (knapsack)
  ProgressiveSchedule schedule;
};

// RateQuant over p (components in kv_component_index order, n_layers * n_kv_heads * 2 of them) with the
// finals restricted to ladder widths, then the schedule. Error unless p.min_max_quantizer (the shift
// is defined for min-max codes only) and at least one ladder width lies in [min_bits, max_bits].
CombinedAllocation combined_allocate(const RateQuantProblem& p, int n_layers, int n_kv_heads);

void to_json(nlohmann::json& j, const ProgressiveSchedule& s);
void from_json(const nlohmann::json& j, ProgressiveSchedule& s);
void to_json(nlohmann::json& j, const CombinedAllocation& a);
void from_json(const nlohmann::json& j, CombinedAllocation& a);

}  // namespace mpkv

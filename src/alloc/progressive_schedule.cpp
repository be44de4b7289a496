#include "alloc/progressive_schedule.h"

#include <nlohmann/json.hpp>
#include <string>

#include "util/error.h"

namespace mpkv {

bool is_ladder_bits(int bits) { return bits == 16 || bits == 8 || bits == 4 || bits == 2; }

ProgressiveSchedule progressive_schedule(int n_layers, int n_kv_heads, const std::vector<int>& final_bits) {
  MPKV_CHECK(n_layers >= 1 && n_kv_heads >= 1, "progressive schedule: need at least one layer and one KV head");
  const size_t n = (size_t)n_layers * n_kv_heads * 2;
  MPKV_CHECK(final_bits.size() == n, "progressive schedule: " + std::to_string(final_bits.size()) +
                                         " final bit-widths for " + std::to_string(n_layers) + " layers x " +
                                         std::to_string(n_kv_heads) + " KV heads x {K, V} = " + std::to_string(n));
  ProgressiveSchedule s;
  s.n_layers = n_layers;
  s.n_kv_heads = n_kv_heads;
  s.components.resize(n);
  for (int l = 0; l < n_layers; ++l)
    for (int h = 0; h < n_kv_heads; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        const size_t i = kv_component_index(l, h, kv, n_kv_heads);
        const int fb = final_bits[i];
        MPKV_CHECK(is_ladder_bits(fb), "progressive schedule: layer " + std::to_string(l) + " head " +
                                           std::to_string(h) + (kv ? " V" : " K") + " has final " +
                                           std::to_string(fb) +
                                           " bits, not reachable from 16 by halving shifts (allowed: 2, 4, 8, 16)");
        ProgressiveComponent& c = s.components[i];
        c.layer = l, c.head = h, c.kv = kv, c.final_bits = fb;
        for (int b = kProgressiveStartBits; b >= fb; b /= 2) c.ladder.push_back(b);
      }
  return s;
}

CombinedAllocation combined_allocate(const RateQuantProblem& p, int n_layers, int n_kv_heads) {
  validate(p);
  MPKV_CHECK(p.min_max_quantizer, "combined allocation: the progressive shift needs a min-max quantizer "
                                  "(uniform, kivi or rotated), not Lloyd-Max codes");
  MPKV_CHECK(n_layers >= 1 && n_kv_heads >= 1 && p.components.size() == (size_t)n_layers * n_kv_heads * 2,
             "combined allocation: " + std::to_string(p.components.size()) + " components for " +
                 std::to_string(n_layers) + " layers x " + std::to_string(n_kv_heads) + " KV heads x {K, V}");
  std::vector<int> allowed;
  for (int b = kProgressiveLowestBits; b <= kProgressiveStartBits; b *= 2)
    if (b >= p.min_bits && b <= p.max_bits) allowed.push_back(b);
  MPKV_CHECK(!allowed.empty(), "combined allocation: no ladder width (2, 4, 8, 16) lies in [" +
                                   std::to_string(p.min_bits) + ", " + std::to_string(p.max_bits) + "]");
  CombinedAllocation a;
  // With one width the set is "contiguous" and ratequant_allocate takes the greedy path, which then
  // gives every component that width: still on the ladder.
  a.ratequant = ratequant_allocate(p, allowed);
  a.schedule = progressive_schedule(n_layers, n_kv_heads, a.ratequant.bits);
  return a;
}

void to_json(nlohmann::json& j, const ProgressiveSchedule& s) {
  nlohmann::json comps = nlohmann::json::array();
  for (const ProgressiveComponent& c : s.components)
    comps.push_back({{"layer", c.layer}, {"head", c.head}, {"kv", c.kv ? "V" : "K"},
                     {"final_bits", c.final_bits}, {"ladder", c.ladder}});
  j = {{"n_layers", s.n_layers}, {"n_kv_heads", s.n_kv_heads}, {"start_bits", s.start_bits},
       {"components", comps}};
}

void from_json(const nlohmann::json& j, ProgressiveSchedule& s) {
  j.at("n_layers").get_to(s.n_layers);
  j.at("n_kv_heads").get_to(s.n_kv_heads);
  j.at("start_bits").get_to(s.start_bits);
  s.components.clear();
  for (const auto& c : j.at("components")) {
    ProgressiveComponent pc;
    c.at("layer").get_to(pc.layer);
    c.at("head").get_to(pc.head);
    const std::string kv = c.at("kv").get<std::string>();
    MPKV_CHECK(kv == "K" || kv == "V", "progressive schedule: kv must be \"K\" or \"V\", got \"" + kv + "\"");
    pc.kv = kv == "V";
    c.at("final_bits").get_to(pc.final_bits);
    c.at("ladder").get_to(pc.ladder);
    s.components.push_back(pc);
  }
}

void to_json(nlohmann::json& j, const CombinedAllocation& a) {
  j = {{"ratequant", a.ratequant}, {"schedule", a.schedule}};
}

void from_json(const nlohmann::json& j, CombinedAllocation& a) {
  j.at("ratequant").get_to(a.ratequant);
  j.at("schedule").get_to(a.schedule);
}

}  // namespace mpkv

// Splitting engine steps' wall time between prefill and decode (docs/cli.md, "generate"): a step
// that forwards p prefill tokens and d decode tokens books p / (p + d) of its time to prefill and
// the rest to decode, so the two always add up to the steps' wall time, and a step that mixes
// prompt chunks with decode tokens no longer counts as prefill only.
#pragma once
#include <vector>

namespace mpkv {

struct StepTime {
  int prefill_tokens = 0;  // prompt (or recomputed) tokens forwarded in the step
  int decode_tokens = 0;   // one per sequence forwarding its last sampled token
  double seconds = 0.0;    // wall time of the step
};

struct PhaseSeconds {
  double prefill = 0.0, decode = 0.0;
  int prefill_tokens = 0, decode_tokens = 0;
};

// Sums the split of every step; a step without tokens books nothing to either phase (its time
// still counts in neither, so callers pass only steps that forwarded tokens).
PhaseSeconds split_phase_seconds(const std::vector<StepTime>& steps);

}  // namespace mpkv

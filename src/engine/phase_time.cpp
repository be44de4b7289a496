#include "engine/phase_time.h"

namespace mpkv {

PhaseSeconds split_phase_seconds(const std::vector<StepTime>& steps) {
  PhaseSeconds r;
  for (const StepTime& s : steps) {
    const int n = s.prefill_tokens + s.decode_tokens;
    if (n <= 0) continue;
    const double pf = s.seconds * s.prefill_tokens / n;
    r.prefill += pf;
    r.decode += s.seconds - pf;  // the two parts add up to the step's time exactly
    r.prefill_tokens += s.prefill_tokens;
    r.decode_tokens += s.decode_tokens;
  }
  return r;
}

}  // namespace mpkv

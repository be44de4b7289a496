#include "attention/attention_f16.h"

#include <cmath>

namespace mpkv {

AttendF16PartialFn attend_f16_partial_for(Isa isa) {
  switch (isa) {
    case Isa::avx512: return attend_f16_partial_avx512;
    case Isa::avx2: return attend_f16_partial_avx2;
    case Isa::scalar: break;
  }
  return attend_f16_partial_ref;
}

AttendF16PartialFn attend_f16_partial() {
  static const AttendF16PartialFn fn = attend_f16_partial_for(active_isa());
  return fn;
}

void softmax_partial_merge(SoftmaxPartialView a, SoftmaxPartialView b, int group, int head_dim) {
  for (int g = 0; g < group; ++g) {
    const float m = std::max(a.m[g], b.m[g]);
    // The larger side's factor is exp(0) = 1 (exactly): not asked of expf, whose two calls per
    // query took a third of the merge's samples in perf (docs/results/speed.md 11g).
    const float sa = a.m[g] == m ? 1.0f : std::exp(a.m[g] - m), sb = b.m[g] == m ? 1.0f : std::exp(b.m[g] - m);
    a.l[g] = a.l[g] * sa + b.l[g] * sb;
    a.m[g] = m;
    float* aa = a.acc + (size_t)g * head_dim;
    const float* ba = b.acc + (size_t)g * head_dim;
    for (int d = 0; d < head_dim; ++d) aa[d] = aa[d] * sa + ba[d] * sb;
  }
}

void softmax_partial_finish(SoftmaxPartialView s, int group, int head_dim, float* out) {
  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / s.l[g];
    for (int d = 0; d < head_dim; ++d) out[(size_t)g * head_dim + d] = s.acc[(size_t)g * head_dim + d] * inv;
  }
}

}  // namespace mpkv

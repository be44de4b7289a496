// Attention over an fp16 K/V store, as an online-softmax partial over a range of cache rows,
// so a long context can be split across threads and the partials merged.
#pragma once
#include <cstddef>
#include <cstdint>

#include "util/cpu_features.h"

namespace mpkv {

// Unnormalised softmax state of `group` query heads over some set of cache rows:
//   m[g] = max score, l[g] = sum exp(score - m[g]), acc[g][d] = sum exp(score - m[g]) * V_t.
// Final output = acc / l. Merging two states rescales each by exp(m_i - max(m_a, m_b)).
struct SoftmaxPartialView {
  float* m;    // [group]
  float* l;    // [group]
  float* acc;  // [group, head_dim]
};

// q:     [group, head_dim] fp32 (the query heads sharing this KV head)
// k, v:  row t at k + t * row_stride (uint16 fp16 bits), rows t in [t0, t1), t1 > t0
// scratch: at least group * (t1 - t0) floats
using AttendF16PartialFn = void (*)(const float* q, int group, int head_dim, const uint16_t* k, const uint16_t* v,
                                    size_t row_stride, int t0, int t1, float scale, float* scratch,
                                    SoftmaxPartialView out);

void attend_f16_partial_ref(const float* q, int group, int head_dim, const uint16_t* k, const uint16_t* v,
                            size_t row_stride, int t0, int t1, float scale, float* scratch, SoftmaxPartialView out);
void attend_f16_partial_avx2(const float* q, int group, int head_dim, const uint16_t* k, const uint16_t* v,
                             size_t row_stride, int t0, int t1, float scale, float* scratch, SoftmaxPartialView out);
void attend_f16_partial_avx512(const float* q, int group, int head_dim, const uint16_t* k, const uint16_t* v,
                               size_t row_stride, int t0, int t1, float scale, float* scratch, SoftmaxPartialView out);

// The variant for an ISA, and the one chosen once for this process from active_isa().
AttendF16PartialFn attend_f16_partial_for(Isa isa);
AttendF16PartialFn attend_f16_partial();

// Merges b into a (both [group] / [group, head_dim]).
void softmax_partial_merge(SoftmaxPartialView a, SoftmaxPartialView b, int group, int head_dim);
// out[g][d] = acc[g][d] / l[g].
void softmax_partial_finish(SoftmaxPartialView s, int group, int head_dim, float* out);

}  // namespace mpkv

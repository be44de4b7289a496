// The sampler's passes over a row of logits (docs/design.md, "Sampling"), and their per-ISA table
// (src/util/cpu_features.h picks the tier once; MPKV_ISA forces it down).
//
//   argmax       the first index of the largest logit; a NaN is never the largest, except that
//                x[0] = NaN returns 0 (the plain `if (x[i] > x[best])` loop's answer)
//   max_value    the largest non-NaN logit, -inf when there is none (n >= 1)
//   exp_weights  w[i] = expf((l[i] - mx) / temperature), the difference and the quotient rounded
//                to float exactly as the scalar loop does; returns sum_i (double)w[i]. mx is the
//                largest logit (every argument <= 0). The _ref entry calls std::exp; the SIMD
//                entries evaluate exp in double precision (a degree-11 polynomial after reduction
//                by ln 2, error below 1e-14 relative) and round to float, so w[i] is the correctly
//                rounded exp, which glibc's expf also returns in all but rare cases: the tiers
//                agree with _ref to the bit except, rarely, by one ulp (test_engine_sampler_kernels).
//                The sum's order of additions differs between tiers (lanes), by ~1e-16 relative.
//                A NaN argument weighs 0 (a NaN logit is never drawn while a number is kept).
//   select_range the ids i with lo <= l[i] < hi (ordered compares: NaN is never selected), in
//                increasing order, written to out; returns how many
#pragma once
#include <cstdint>

#include "util/cpu_features.h"

namespace mpkv {

using SamplerArgmaxFn = int32_t (*)(const float* x, int n);
using SamplerMaxFn = float (*)(const float* x, int n);
using SamplerExpWeightsFn = double (*)(const float* l, int n, float mx, float temperature, float* w);
using SamplerSelectRangeFn = int (*)(const float* l, int n, float lo, float hi, int32_t* out);

struct SamplerKernels {
  Isa isa;
  SamplerArgmaxFn argmax;
  SamplerMaxFn max_value;
  SamplerExpWeightsFn exp_weights;
  SamplerSelectRangeFn select_range;
};

// The table for active_isa(), chosen once.
const SamplerKernels& sampler_kernels();
// The table of one tier (tests); throws Error when this CPU cannot run it.
const SamplerKernels& sampler_kernels_for(Isa isa);

int32_t sampler_argmax_ref(const float* x, int n);
float sampler_max_ref(const float* x, int n);
double sampler_exp_weights_ref(const float* l, int n, float mx, float temperature, float* w);
int sampler_select_range_ref(const float* l, int n, float lo, float hi, int32_t* out);

int32_t sampler_argmax_avx2(const float* x, int n);
float sampler_max_avx2(const float* x, int n);
double sampler_exp_weights_avx2(const float* l, int n, float mx, float temperature, float* w);
int sampler_select_range_avx2(const float* l, int n, float lo, float hi, int32_t* out);

int32_t sampler_argmax_avx512(const float* x, int n);
float sampler_max_avx512(const float* x, int n);
double sampler_exp_weights_avx512(const float* l, int n, float mx, float temperature, float* w);
int sampler_select_range_avx512(const float* l, int n, float lo, float hi, int32_t* out);

}  // namespace mpkv

#include "attention/paged_attention_kernels.h"

#include <string>

#include "util/error.h"

namespace mpkv {

namespace {
constexpr PagedAttentionKernels kRef{Isa::scalar, packed_scores_ref, packed_accumulate_ref, f16_scores_ref,
                                     f16_accumulate_ref, exp_sum_ref, packed_scores_q8_ref, max_value_ref,
                                     packed_accumulate_q8_ref, "ref"};
constexpr PagedAttentionKernels kAvx2{Isa::avx2, packed_scores_avx2, packed_accumulate_avx2, f16_scores_avx2,
                                      f16_accumulate_avx2, exp_sum_avx2, packed_scores_q8_avx2,
                                      max_value_avx2, packed_accumulate_q8_avx2, "avx2"};
constexpr PagedAttentionKernels kAvx512{Isa::avx512, packed_scores_avx512, packed_accumulate_avx512,
                                        f16_scores_avx512, f16_accumulate_avx512, exp_sum_avx512,
                                        packed_scores_q8_avx512, max_value_avx2, packed_accumulate_q8_avx512,
                                        "avx512"};
constexpr PagedAttentionKernels kAvx512Vnni{Isa::avx512, packed_scores_avx512, packed_accumulate_avx512,
                                            f16_scores_avx512, f16_accumulate_avx512, exp_sum_avx512,
                                            packed_scores_q8_avx512vnni, max_value_avx2,
                                            packed_accumulate_q8_avx512vnni, "avx512vnni"};
}  // namespace

const PagedAttentionKernels& paged_attention_kernels_for(Isa isa) {
  MPKV_CHECK(isa <= best_isa(), std::string("paged attention: this CPU cannot run the ") + isa_name(isa) + " kernels");
  switch (isa) {
    case Isa::avx512: return cpu_features().avx512vnni ? kAvx512Vnni : kAvx512;
    case Isa::avx2: return kAvx2;
    case Isa::scalar: break;
  }
  return kRef;
}

const PagedAttentionKernels& paged_attention_kernels() {
  static const PagedAttentionKernels& k = paged_attention_kernels_for(active_isa());
  return k;
}

std::vector<const PagedAttentionKernels*> paged_attention_kernel_tables() {
  std::vector<const PagedAttentionKernels*> t{&kRef};
  if (best_isa() >= Isa::avx2) t.push_back(&kAvx2);
  if (best_isa() >= Isa::avx512) t.push_back(&kAvx512);
  if (best_isa() >= Isa::avx512 && cpu_features().avx512vnni) t.push_back(&kAvx512Vnni);
  return t;
}

}  // namespace mpkv

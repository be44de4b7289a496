#include "cuda/page_table.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace mpkv::cuda {

BatchTable build_batch_table(const std::vector<SequenceView>& seqs, int page_tokens, int target_items) {
  MPKV_CHECK(page_tokens > 0 && target_items > 0, "CUDA page table: page_tokens and target_items must be positive");
  BatchTable t;
  int64_t total_pages = 0;
  for (const SequenceView& s : seqs) total_pages += (int64_t)s.page_slots.size();
  t.pages_per_item = (int)std::max<int64_t>(1, (total_pages + target_items - 1) / target_items);
  t.page_indptr.push_back(0);
  t.work_indptr.push_back(0);
  for (size_t b = 0; b < seqs.size(); ++b) {
    const SequenceView& s = seqs[b];
    const int np = (int)s.page_slots.size();
    MPKV_CHECK(np > 0 || s.f16_rows > 0, "CUDA page table: sequence " + std::to_string(b) + " holds no rows");
    MPKV_CHECK(s.f16_rows >= 0 && (np == 0 || (s.last_page_len >= 1 && s.last_page_len <= page_tokens)),
               "CUDA page table: sequence " + std::to_string(b) + " has last_page_len " +
                   std::to_string(s.last_page_len) + " outside [1, " + std::to_string(page_tokens) + "]");
    const int32_t p0 = t.page_indptr.back();
    t.page_indices.insert(t.page_indices.end(), s.page_slots.begin(), s.page_slots.end());
    t.page_indptr.push_back(p0 + np);
    t.last_page_len.push_back(np > 0 ? s.last_page_len : 0);
    t.f16_k.push_back(s.f16_k);
    t.f16_v.push_back(s.f16_v);
    t.f16_rows.push_back(s.f16_rows);
    // ceil(np / pages_per_item) items of equal size (within one page), so a sequence just over a
    // multiple of pages_per_item does not get a nearly empty last item; the first also takes the
    // fp16 rows, and a sequence without pages gets that one item.
    const int items = std::max(1, (np + t.pages_per_item - 1) / t.pages_per_item);
    for (int k = 0; k < items; ++k) {
      const int32_t a = p0 + (int32_t)((int64_t)k * np / items), e = p0 + (int32_t)((int64_t)(k + 1) * np / items);
      t.work.push_back({(int32_t)b, a, e, k == 0 ? 1 : 0});
    }
    t.work_indptr.push_back((int32_t)t.work.size());
  }
  return t;
}

int64_t table_rows(const BatchTable& t, int b, int page_tokens) {
  const int np = t.page_indptr[b + 1] - t.page_indptr[b];
  return t.f16_rows[b] + (np == 0 ? 0 : (int64_t)(np - 1) * page_tokens + t.last_page_len[b]);
}

}  // namespace mpkv::cuda

// The batch-wide page table of one decode step at one layer, built on the host (docs/cuda.md,
// "Page table"). Shape of flashinfer's paged KV arguments:
//   page_indptr[b] .. page_indptr[b + 1]   sequence b's pages in page_indices (position order)
//   page_indices[i]                        a page slot of the store (its arena offset, per-block
//                                          offsets and widths live in the store's slot arrays)
//   last_page_len[b]                       rows in b's last page (page_tokens when it is full)
// plus each sequence's fp16 rows (sink and window, [rows][n_head_kv][head_dim] at an arena offset)
// and the flash-decoding split: work items (a sequence's run of pages; the first item of a
// sequence also takes its fp16 rows), work_indptr[b] .. work_indptr[b + 1] the items of b, whose
// partial softmax states the merge kernel combines.
#pragma once
#include <cstdint>
#include <vector>

namespace mpkv::cuda {

// One sequence at one layer, as the store holds it.
struct SequenceView {
  std::vector<int32_t> page_slots;  // store slots in position order
  int last_page_len = 0;            // rows of the last page (ignored without pages)
  uint64_t f16_k = 0, f16_v = 0;    // arena byte offsets of its fp16 K and V rows
  int f16_rows = 0;                 // sink + window rows
};

struct WorkItem {
  int32_t seq = 0;
  int32_t page_begin = 0, page_end = 0;  // range of page_indices
  int32_t with_f16 = 0;                  // 1: also the sequence's fp16 rows
};

struct BatchTable {
  std::vector<int32_t> page_indptr, page_indices, last_page_len;
  std::vector<uint64_t> f16_k, f16_v;
  std::vector<int32_t> f16_rows;
  std::vector<WorkItem> work;
  std::vector<int32_t> work_indptr;
  int pages_per_item = 1;
};

// Builds the table; with pages_per_item = ceil(total pages / target_items) (at least 1), a sequence of
// np pages gets ceil(np / pages_per_item) items of (nearly) equal size, so a batch has about
// target_items items per KV head whatever its shape: one long sequence is split across the GPU, many
// short ones take one item each. Error for a sequence
// with no rows, or last_page_len outside [1, page_tokens].
BatchTable build_batch_table(const std::vector<SequenceView>& seqs, int page_tokens, int target_items);

// Rows sequence b holds (fp16 rows and pages).
int64_t table_rows(const BatchTable& t, int b, int page_tokens);

}  // namespace mpkv::cuda

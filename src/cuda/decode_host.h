// The append and decode attention kernels' algorithms on the host (docs/cuda.md, "Verification"): a host copy of
// what the device store holds (HostStore: one arena, slot arrays, layout table), and decode_on_host,
// which runs the split and merge kernels' steps with the kernels' own row indexing and softmax
// updates (decode_rows_hd.h): the same work items, rows interleaved over kDecodeWarps "warps", the
// warps' states merged in order, then the items merged in order. Only the lanes and shuffles (a
// dot product's summation order) are the device's own. The CPU tests compare it with the
// reference; the device tests compare the kernels with the same reference.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/device_block_layout.h"
#include "cuda/kernel_args.h"
#include "cuda/page_format.h"
#include "cuda/page_table.h"

namespace mpkv::cuda {

struct HostStore {
  explicit HostStore(const PageFormat& format);
  // Places a page / fp16 rows [n][n_head_kv][head_dim] in the arena: its slot / arena offset.
  int upload_page(const HostPage& p);
  // A page at the components' initial bits, zeroed (for append_on_host).
  int new_page();
  HostPage page(int slot, int filled) const;
  uint64_t upload_rows(const uint16_t* rows, int n);

  const PageFormat& f;
  std::vector<uint8_t> arena;
  std::vector<uint64_t> base;       // [slot]
  std::vector<uint32_t> block_off;  // [slot][n_blocks]
  std::vector<uint8_t> bits;        // [slot][n_blocks]
  std::vector<DeviceBlockLayout> layouts;
};

// The append kernel's units (append_hd.h), run one after another: rows of k16 / v16
// ([rows][n_head_kv][head_dim] fp16) into the tasks' pages, checked as DevicePageStore::append
// checks them (check_append_task).
void append_on_host(HostStore& s, const std::vector<AppendTask>& tasks, const uint16_t* k16, const uint16_t* v16,
                    int rows);

// Output [batch][n_head][head_dim] for queries q of the same shape (unscaled).
std::vector<float> decode_on_host(const HostStore& s, const BatchTable& t, int n_head, const std::vector<float>& q);

}  // namespace mpkv::cuda

// The device page store (docs/cuda.md, "Page store"): one arena of device memory holding pages of
// every width of one layer's PageFormat (byte-exact CPU pages) and fp16 row buffers (sinks and
// windows), the slot arrays that locate each page's blocks, and the operations the kernels do on
// them: upload (a CPU page copied as it is), quantize-on-append, in-place shrink, decode attention.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/arena_allocator.h"
#include "cuda/device/device_buffer.h"
#include "cuda/kernel_args.h"
#include "cuda/page_format.h"
#include "cuda/page_table.h"

namespace mpkv::cuda {

class DevicePageStore {
 public:
  // Error when the arena cannot be allocated.
  DevicePageStore(PageFormat format, uint64_t arena_bytes);

  const PageFormat& format() const { return f_; }
  uint64_t arena_used() const { return alloc_.used(); }

  // A slot holding a copy of a host page; Error when the arena is full.
  int upload_page(const HostPage& p);
  // A slot with a page at the components' initial bits and undefined contents, for append().
  int new_page();
  // A slot holding a device-side copy of the page in `slot` (benchmarks fill long contexts this way).
  int clone_page(int slot);
  // The page's bytes and bits (filled as given: the store does not track rows).
  HostPage download_page(int slot, int filled) const;
  const std::vector<uint8_t>& slot_bits(int slot) const;
  void free_page(int slot);
  // fp16 rows [n][n_head_kv][head_dim] into the arena; returns their offset (free_rows to give back).
  uint64_t upload_rows(const uint16_t* rows, int n);
  void free_rows(uint64_t offset) { alloc_.free(offset); }

  // Quantize-on-append of rows [0, rows) of k16 / v16 (host, [rows][n_head_kv][head_dim] fp16) by the tasks.
  void append(const std::vector<AppendTask>& tasks, const uint16_t* k16, const uint16_t* v16, int rows);

  // One halving (or none) per block of each page, in place on the device (shrink_moves.h), then the
  // tails go back to the arena. prepare builds and uploads the moves; run launches (asynchronous,
  // what a benchmark times); commit waits and updates the slots.
  struct PreparedShrink {
    std::vector<int> slots;
    std::vector<std::vector<uint8_t>> to_bits;
    DeviceBuffer base, indptr, moves;
    uint64_t src_bytes = 0;  // bytes of the pages before the shrink
  };
  PreparedShrink prepare_shrink(const std::vector<int>& slots, const std::vector<std::vector<uint8_t>>& to_bits);
  void run_shrink(const PreparedShrink& s);
  void commit_shrink(PreparedShrink& s);

  // Uploads the slot arrays when they changed (before kernels read them).
  void sync_slots();
  uint8_t* arena() const { return arena_.as<uint8_t>(); }
  SlotArrays device_slots() const;
  const DeviceBlockLayout* device_layouts() const { return layouts_.as<DeviceBlockLayout>(); }

 private:
  int place(const std::vector<uint8_t>& bits);
  PageFormat f_;
  DeviceBuffer arena_, layouts_;
  ArenaAllocator alloc_;
  // Slot arrays (kernel_args.h SlotArrays), host copies; a free slot has no bits.
  std::vector<uint64_t> base_;
  std::vector<uint32_t> block_off_;
  std::vector<uint8_t> bits_flat_;
  std::vector<std::vector<uint8_t>> bits_;
  std::vector<int> free_slots_;
  DeviceBuffer d_base_, d_off_, d_bits_;
  bool dirty_ = true;
};

// One decode step of a batch at one layer: the page table on the device and the launches.
class DecodeStep {
 public:
  // Uploads the table and allocates the queries, partials and outputs; the store must have every
  // page of the table and must not change while the step is used.
  DecodeStep(DevicePageStore& store, const BatchTable& table, int n_head);
  // q [batch][n_head][head_dim] fp32, host.
  void set_queries(const std::vector<float>& q);
  void run();  // asynchronous
  std::vector<float> output();  // waits; [batch][n_head][head_dim]
  int n_work() const { return args_.n_work; }

 private:
  DecodeArgs args_;
  DeviceBuffer indptr_, indices_, last_, f16k_, f16v_, f16n_, work_, work_indptr_, q_, partial_, out_;
};

}  // namespace mpkv::cuda

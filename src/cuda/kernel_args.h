// Arguments of the CUDA kernels (src/cuda/device/*.cu): plain structs of device pointers, built
// by the host-side store (src/cuda/device/device_page_store.h). Shapes in the comments; "slot" is
// a page's index in the store's slot arrays (page_table.h).
#pragma once
#include <cstdint>

#include "cuda/device_block_layout.h"
#include "cuda/page_table.h"
#include "cuda/shrink_moves.h"

namespace mpkv::cuda {

// Most query heads per KV head (GQA group) and channels per lane (head_dim / 32) the decode
// kernel keeps in registers: head_dim <= 256, group <= 8.
inline constexpr int kMaxGroup = 8;
inline constexpr int kMaxChannelsPerLane = 8;
// Warps per decode block; warp w takes rows w, w + kDecodeWarps, ... of a work item.
inline constexpr int kDecodeWarps = 4;

// Where each page lives: arena offset base[slot]; block b at base + block_off[slot * n_blocks + b]
// with bits[slot * n_blocks + b] (the layout: layouts[b * kBitsSlots + bits]).
struct SlotArrays {
  const uint64_t* base = nullptr;
  const uint32_t* block_off = nullptr;
  const uint8_t* bits = nullptr;
};

// Quantize-on-append: rows [src_row0, src_row0 + n) of the step's fp16 K/V go to rows [t0, t0 + n)
// of the page in `slot` (n a multiple of the page's token granularity, t0 too).
struct AppendTask {
  int32_t slot = 0, t0 = 0, n = 0, src_row0 = 0;
};

struct AppendArgs {
  uint8_t* arena = nullptr;
  SlotArrays slots;
  const DeviceBlockLayout* layouts = nullptr;  // [n_blocks][kBitsSlots]
  int n_blocks = 0, n_head_kv = 0, head_dim = 0;
  const uint16_t* k16 = nullptr;  // [rows][n_head_kv][head_dim] fp16 bits
  const uint16_t* v16 = nullptr;
  const AppendTask* tasks = nullptr;
  int n_tasks = 0;
};

// In-place shrink of n_pages pages: page i at arena + page_base[i] runs moves
// [move_indptr[i], move_indptr[i + 1]) in order (shrink_moves.h).
struct ShrinkArgs {
  uint8_t* arena = nullptr;
  const uint64_t* page_base = nullptr;
  const int32_t* move_indptr = nullptr;
  const ShrinkMove* moves = nullptr;
  int n_pages = 0;
};

// Decode attention: one query token per sequence, q [batch][n_head][head_dim] fp32 (unscaled;
// the kernel multiplies scores by `scale`), out the same shape. The table arrays are page_table.h's.
// partial: [n_work][n_head][2 + head_dim] floats (m, l, acc) written by the split kernel, read by
// the merge kernel.
struct DecodeArgs {
  const uint8_t* arena = nullptr;
  SlotArrays slots;
  const DeviceBlockLayout* layouts = nullptr;
  int n_blocks = 0, n_head = 0, n_head_kv = 0, head_dim = 0, page_tokens = 0, batch = 0;
  const int32_t* page_indptr = nullptr;
  const int32_t* page_indices = nullptr;
  const int32_t* last_page_len = nullptr;
  const uint64_t* f16_k = nullptr;
  const uint64_t* f16_v = nullptr;
  const int32_t* f16_rows = nullptr;
  const WorkItem* work = nullptr;
  int n_work = 0;
  const int32_t* work_indptr = nullptr;
  const float* q = nullptr;
  float scale = 1.0f;
  float* partial = nullptr;
  float* out = nullptr;
};

}  // namespace mpkv::cuda

// Launches of the CUDA kernels (docs/cuda.md, "Kernels"). All run on the default stream and return
// at once (asynchronous); device_synchronize() waits and reports errors. Arguments: kernel_args.h.
//
//   append   grid (tasks, blocks of a page), 128 threads: one thread per token-axis channel group,
//            per KIVI 8-channel run of a token group, or per fp16 element
//   shrink   grid (pages), 256 threads: the page's moves in order, chunks of 1024 destination bytes
//   decode   split: grid (work items, KV heads), 128 threads = 4 warps; each warp takes every 4th
//            row of the item, lane l the channels [l * d/32, (l+1) * d/32), all query heads of the
//            KV head (GQA) from the same row read; the warps' states meet in shared memory and
//            the item's partial (m, l, acc) goes to `partial`.
//            merge: grid (batch, query heads), 128 threads over head_dim: the sequence's items
//            merged in order (merge_weights), divided by l.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/kernel_args.h"

namespace mpkv::cuda {

inline constexpr int kAppendThreads = 128;
inline constexpr int kShrinkThreads = 256;
inline constexpr int kShrinkBytesPerThread = 4;
inline constexpr uint32_t kShrinkChunk = kShrinkThreads * kShrinkBytesPerThread;

void launch_append(const AppendArgs& a);
void launch_shrink(const ShrinkArgs& a);
void launch_decode(const DecodeArgs& a);

// Device runs of the shared fp16 helpers (cuda/hd.h), for the device tests: every half to float;
// x rounded to half to nearest, down and up; group_params and the codes of `probe` values.
std::vector<float> device_half_to_float_all();
void device_float_to_half(const std::vector<float>& x, std::vector<uint16_t>& rn, std::vector<uint16_t>& down,
                          std::vector<uint16_t>& up);
void device_group_params(const std::vector<float>& lo, const std::vector<float>& hi, int bits,
                         std::vector<uint16_t>& scale_h, std::vector<uint16_t>& zero_h);

}  // namespace mpkv::cuda

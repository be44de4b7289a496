// The quantize-on-append kernel's work split (src/cuda/device/kv_kernels.cu), shared with its host
// emulation (decode_host.h: append_on_host) so the CPU tests run the kernel's own indexing. One
// block b of one task's page is cut into units that write disjoint bytes: an fp16 element, a
// token-axis channel group of one row (group % 8 == 0: whole code bytes, its own scale and zero),
// or a KIVI run of 8 channels over one token group (`bits` whole bytes per row, 8 scales and zeros).
#pragma once
#include <cstdint>

#include "cuda/kernel_args.h"
#include "cuda/kv_math_hd.h"

namespace mpkv::cuda {

MPKV_HD int append_units(const DeviceBlockLayout& L, int n_rows) {
  if (L.format == BlockFormat::f16_rows) return n_rows * L.head_dim;
  if (L.format == BlockFormat::uniform_token) return n_rows * (L.head_dim / L.group);
  return (n_rows / L.group) * (L.head_dim / 8);
}

// The block's layout and bytes for a task.
MPKV_HD DeviceBlockLayout append_layout(const AppendArgs& a, const AppendTask& task, int b) {
  return a.layouts[b * kBitsSlots + a.slots.bits[(size_t)task.slot * a.n_blocks + b]];
}

// Unit u (< append_units) of block b of the task.
MPKV_HD void append_unit(const AppendArgs& a, const AppendTask& task, int b, const DeviceBlockLayout& L, int u) {
  const int h = b / 2, d = a.head_dim;
  uint8_t* blk = a.arena + a.slots.base[task.slot] + a.slots.block_off[(size_t)task.slot * a.n_blocks + b];
  const size_t row = (size_t)a.n_head_kv * d;
  const uint16_t* src = (b % 2 == 0 ? a.k16 : a.v16) + (size_t)task.src_row0 * row + (size_t)h * d;
  if (L.format == BlockFormat::f16_rows) {
    const int i = u / d, c = u % d;
    store_u16(blk + 2 * ((size_t)(task.t0 + i) * d + c), src[(size_t)i * row + c]);
  } else if (L.format == BlockFormat::uniform_token) {
    const int per_row = d / L.group, i = u / per_row, g0 = (u % per_row) * L.group;
    quantize_token_group(L, blk, task.t0 + i, g0, [&](int c) { return half_to_float(src[(size_t)i * row + c]); });
  } else {
    const int runs = d / 8, i0 = (u / runs) * L.group, c0 = (u % runs) * 8;
    quantize_channel_run(L, blk, task.t0 + i0, c0,
                         [&](int i, int c) { return half_to_float(src[(size_t)(i0 + i) * row + c]); });
  }
}

}  // namespace mpkv::cuda

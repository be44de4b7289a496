#include "cuda/device_block_layout.h"

#include "quant/kv_block_layout.h"
#include "util/error.h"

namespace mpkv::cuda {

DeviceBlockLayout to_device_layout(const KvBlockLayout& L) {
  MPKV_CHECK(L.codec == Codec::uniform,
             "CUDA page store: Lloyd-Max (turbo) blocks have no device kernels yet (docs/cuda.md)");
  MPKV_CHECK(L.bytes < (1ull << 32), "CUDA page store: a block of " + std::to_string(L.bytes) + " bytes exceeds 4 GiB");
  DeviceBlockLayout d;
  d.format = L.axis == GroupAxis::token ? BlockFormat::uniform_token : BlockFormat::uniform_channel;
  d.bits = L.bits;
  d.head_dim = L.head_dim;
  d.tokens = L.tokens;
  d.group = L.group;
  d.scale_mult = L.scale_mult;
  d.row_bytes = (uint32_t)L.row_bytes;
  d.scales_offset = (uint32_t)L.scales_offset;
  d.zeros_offset = (uint32_t)L.zeros_offset;
  d.n_params = (uint32_t)L.n_params;
  d.bytes = (uint32_t)L.bytes;
  return d;
}

DeviceBlockLayout f16_rows_layout(int head_dim, int tokens) {
  MPKV_CHECK(head_dim > 0 && tokens > 0, "CUDA page store: fp16 block needs head_dim > 0 and tokens > 0");
  DeviceBlockLayout d;
  d.format = BlockFormat::f16_rows;
  d.bits = 16;
  d.head_dim = head_dim;
  d.tokens = tokens;
  d.group = head_dim;
  d.row_bytes = (uint32_t)head_dim * 2;
  d.scales_offset = d.zeros_offset = d.row_bytes * (uint32_t)tokens;
  d.n_params = 0;
  d.bytes = d.scales_offset;
  return d;
}

}  // namespace mpkv::cuda

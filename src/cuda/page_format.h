// A layer's KV page in the CPU's byte format (PageStore, page_store.h), described so the
// host can build, shrink and locate pages that the CUDA kernels read in place (docs/cuda.md):
//   page  = blocks b = 0 .. 2 * n_head_kv - 1 back to back (b = head * 2 + (K ? 0 : 1)), each at its
//           current bits: fp16 rows [page_tokens][head_dim], or a KvBlockLayout block
//           (quant/kv_block_layout.h) whose layout at each width of its ladder is
//           halved_layout of the one above (scale_mult carries the exact shrink factor).
// So a page's size and block offsets follow from its blocks' current bits alone, the rule
// PageStore::block_offset uses, and a page copied byte for byte decodes the same anywhere.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/paged_attention.h"
#include "cuda/device_block_layout.h"
#include "quant/kv_block_layout.h"

namespace mpkv::cuda {

struct AppendTask;  // kernel_args.h

// What one component (layer, KV head, K or V) stores: fp16 rows, or uniform codes written at
// init_bits and shrunk by halvings down to final_bits (init == final: not progressive).
struct ComponentSpec {
  bool f16 = false;
  GroupAxis axis = GroupAxis::token;  // channel: KIVI keys (groups of `group` tokens)
  int group = 0;                      // channels (token axis) or tokens (channel axis) per group
  int init_bits = 16, final_bits = 16;
};

struct ComponentFormat {
  ComponentSpec spec;
  KvBlockLayout host_at[17];        // by bits, for init_bits and every halving down to final_bits
  DeviceBlockLayout device_at[17];  // the same (fp16 rows: at [16])
};

struct PageFormat {
  int n_head_kv = 0, head_dim = 0, page_tokens = 0;
  std::vector<ComponentFormat> blocks;  // [2 * n_head_kv]

  int n_blocks() const { return (int)blocks.size(); }
  uint32_t block_bytes(int b, int bits) const { return blocks[b].device_at[bits].bytes; }
  // Byte offset of block b in a page whose blocks are at bits[0 .. n_blocks).
  uint32_t block_offset(const uint8_t* bits, int b) const;
  uint32_t page_bytes(const uint8_t* bits) const { return block_offset(bits, n_blocks()); }
  // Least common multiple of the channel-axis blocks' token groups (1 when there is none): appends
  // must bring whole groups of every block.
  int token_granularity() const;
  // The device layout table, [n_blocks][kBitsSlots] (unused widths zeroed).
  std::vector<DeviceBlockLayout> device_layout_table() const;
};

// Validates the specs (Error: bits off the ladder, groups that do not divide, head_dim % 32 != 0
// (the kernels give each of 32 lanes head_dim / 32 channels), more than 256 channels) and builds
// the layouts. specs: one per block b, or one for every K block and one for every V block (size 2).
PageFormat make_page_format(int n_head_kv, int head_dim, int page_tokens, const std::vector<ComponentSpec>& specs);

// A page on the host, in the CPU's byte format.
struct HostPage {
  std::vector<uint8_t> bits;   // [n_blocks] current bits
  std::vector<uint8_t> bytes;  // page_bytes(bits)
  int filled = 0;              // rows written
};

// A new page at the components' initial bits holding rows [0, n) of k16, v16 ([n][n_head_kv][head_dim]
// fp16 bits), quantized by the CPU reference kernel (quantize_ref) from their fp32 values, the way
// PagedKvCache::flush (PageStore::write_window_rows) writes pages. n a multiple of token_granularity(), n <= page_tokens.
HostPage write_host_page(const PageFormat& f, const uint16_t* k16, const uint16_t* v16, int n);

// The CPU's shrink: every block b whose to_bits[b] < bits[b] (exactly half; Error otherwise) goes
// through shrink_ref into a new buffer, blocks repacked (KvAccountant::shrink_page, PageStore::rewrite_page).
void shrink_host_page(const PageFormat& f, HostPage& p, const std::vector<uint8_t>& to_bits);

// Error unless `t` may be appended to a page whose blocks are at bits[0 .. n_blocks) from an input of
// `rows` rows: page rows [t0, t0 + n) inside the page in whole token groups of every block
// (token_granularity), input rows [src_row0, src_row0 + n) inside the input, and every block still
// at its initial bits. The append writes fresh codes and scales with scale_mult 1, while a shrunk
// block's layout carries its ladder factor (halved_layout), so codes appended to a shrunk block
// would decode wrong by that factor (PagedKvCache likewise shrinks only pages it has filled).
void check_append_task(const PageFormat& f, const uint8_t* bits, const AppendTask& t, int rows);

// n fp16 values drawn from N(0, sd^2) with a fixed seed: synthetic K/V rows for the tests and the
// benchmark (the same rows for the same seed everywhere).
std::vector<uint16_t> random_half_rows(size_t n, uint32_t seed, float sd = 2.0f);

// Segments of KV head h over the page (for attend_segments, the CPU reference of the device
// attention), positions from pos0.
void append_host_segments(const PageFormat& f, const HostPage& p, int h, int pos0, std::vector<AttnSegment>& out);

}  // namespace mpkv::cuda

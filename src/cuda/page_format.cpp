#include "cuda/page_format.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "cuda/kernel_args.h"
#include "cuda/shrink_moves.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_kernels.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv::cuda {

namespace {
bool on_ladder(int bits) { return bits == 1 || bits == 2 || bits == 4 || bits == 8 || bits == 16; }

ComponentFormat make_component(const ComponentSpec& s, int head_dim, int page_tokens) {
  ComponentFormat c;
  c.spec = s;
  if (s.f16) {
    c.spec.init_bits = c.spec.final_bits = 16;
    c.device_at[16] = f16_rows_layout(head_dim, page_tokens);
    return c;
  }
  MPKV_CHECK(on_ladder(s.init_bits) && on_ladder(s.final_bits) && s.final_bits <= s.init_bits,
             "CUDA page format: bits " + std::to_string(s.init_bits) + " -> " + std::to_string(s.final_bits) +
                 " are not on the ladder 16 -> 8 -> 4 -> 2 -> 1");
  c.host_at[s.init_bits] = make_kv_block_layout(Codec::uniform, s.axis, s.init_bits, head_dim, page_tokens, s.group);
  for (int b = s.init_bits; b > s.final_bits; b /= 2) c.host_at[b / 2] = halved_layout(c.host_at[b]);
  for (int b = s.final_bits; b <= s.init_bits; b *= 2) c.device_at[b] = to_device_layout(c.host_at[b]);
  return c;
}
}  // namespace

uint32_t PageFormat::block_offset(const uint8_t* bits, int b) const {
  uint32_t off = 0;
  for (int i = 0; i < b; ++i) off += block_bytes(i, bits[i]);
  return off;
}

int PageFormat::token_granularity() const {
  int g = 1;  // the least common multiple, as PagedKvCache's: groups of 24 and 32 tokens need 96
  for (const ComponentFormat& c : blocks)
    if (!c.spec.f16 && c.spec.axis == GroupAxis::channel) g = std::lcm(g, c.spec.group);
  return g;
}

std::vector<DeviceBlockLayout> PageFormat::device_layout_table() const {
  std::vector<DeviceBlockLayout> t((size_t)n_blocks() * kBitsSlots);
  for (int b = 0; b < n_blocks(); ++b)
    for (int bits = 0; bits < kBitsSlots; ++bits) t[(size_t)b * kBitsSlots + bits] = blocks[b].device_at[bits];
  return t;
}

PageFormat make_page_format(int n_head_kv, int head_dim, int page_tokens, const std::vector<ComponentSpec>& specs) {
  MPKV_CHECK(n_head_kv > 0 && page_tokens > 0, "CUDA page format: n_head_kv and page_tokens must be positive");
  MPKV_CHECK(head_dim % 32 == 0 && head_dim <= 256,
             "CUDA page format: head_dim " + std::to_string(head_dim) + " must be a multiple of 32 up to 256");
  const size_t nb = 2 * (size_t)n_head_kv;
  MPKV_CHECK(specs.size() == nb || specs.size() == 2,
             "CUDA page format: " + std::to_string(specs.size()) + " component specs for " + std::to_string(nb) + " blocks");
  PageFormat f;
  f.n_head_kv = n_head_kv;
  f.head_dim = head_dim;
  f.page_tokens = page_tokens;
  for (size_t b = 0; b < nb; ++b)
    f.blocks.push_back(make_component(specs.size() == nb ? specs[b] : specs[b % 2], head_dim, page_tokens));
  // Block offsets, page sizes and shrink moves are 32-bit: the page at its initial (largest) bits,
  // summed in 64 bits, must fit.
  uint64_t bytes = 0;
  for (const ComponentFormat& c : f.blocks)
    bytes += c.spec.f16 ? 2ull * head_dim * page_tokens : c.host_at[c.spec.init_bits].bytes;
  MPKV_CHECK(bytes < (1ull << 32), "CUDA page format: a page of " + std::to_string(bytes) +
                                       " bytes exceeds the 4 GiB that 32-bit page offsets address");
  return f;
}

HostPage write_host_page(const PageFormat& f, const uint16_t* k16, const uint16_t* v16, int n) {
  MPKV_CHECK(n >= 1 && n <= f.page_tokens && n % f.token_granularity() == 0,
             "CUDA page format: " + std::to_string(n) + " rows do not fill whole token groups of one page");
  const int d = f.head_dim, nb = f.n_blocks();
  HostPage p;
  p.filled = n;
  for (const ComponentFormat& c : f.blocks) p.bits.push_back((uint8_t)c.spec.init_bits);
  p.bytes.assign(f.page_bytes(p.bits.data()), 0);
  std::vector<float> x((size_t)n * d);
  for (int b = 0; b < nb; ++b) {
    const uint16_t* src = (b % 2 == 0 ? k16 : v16) + (size_t)(b / 2) * d;
    const size_t row = (size_t)f.n_head_kv * d;
    uint8_t* blk = p.bytes.data() + f.block_offset(p.bits.data(), b);
    if (f.blocks[b].spec.f16) {
      for (int i = 0; i < n; ++i) std::memcpy(blk + (size_t)i * d * 2, src + i * row, (size_t)d * 2);
      continue;
    }
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < d; ++c) x[(size_t)i * d + c] = fp16_to_fp32(src[i * row + c]);
    quantize_ref(f.blocks[b].host_at[p.bits[b]], x.data(), (size_t)d, 0, n, blk);
  }
  return p;
}

void shrink_host_page(const PageFormat& f, HostPage& p, const std::vector<uint8_t>& to_bits) {
  const int nb = f.n_blocks();
  MPKV_CHECK((int)to_bits.size() == nb, "CUDA page format: shrink needs one width per block");
  std::vector<uint8_t> out(f.page_bytes(to_bits.data()));
  for (int b = 0; b < nb; ++b) {
    const uint8_t* src = p.bytes.data() + f.block_offset(p.bits.data(), b);
    uint8_t* dst = out.data() + f.block_offset(to_bits.data(), b);
    if (to_bits[b] == p.bits[b]) {
      std::memcpy(dst, src, f.block_bytes(b, p.bits[b]));
      continue;
    }
    const ComponentFormat& c = f.blocks[b];
    MPKV_CHECK(!c.spec.f16 && 2 * to_bits[b] == p.bits[b] && to_bits[b] >= c.spec.final_bits,
               "CUDA page format: block " + std::to_string(b) + " cannot go from " + std::to_string(p.bits[b]) +
                   " to " + std::to_string(to_bits[b]) + " bits");
    shrink_block(c.host_at[p.bits[b]], src, c.host_at[to_bits[b]], dst, quant_kernels_for(Isa::scalar));
  }
  p.bytes = std::move(out);
  p.bits = to_bits;
}

void check_append_task(const PageFormat& f, const uint8_t* bits, const AppendTask& t, int rows) {
  const int g = f.token_granularity();
  MPKV_CHECK(t.n > 0 && t.t0 >= 0 && (int64_t)t.t0 + t.n <= f.page_tokens && t.t0 % g == 0 && t.n % g == 0 &&
                 t.src_row0 >= 0 && (int64_t)t.src_row0 + t.n <= rows,
             "CUDA append: task rows outside the page, the input or its token groups of " + std::to_string(g));
  for (int b = 0; b < f.n_blocks(); ++b)
    MPKV_CHECK(bits[b] == f.blocks[b].spec.init_bits,
               "CUDA append: block " + std::to_string(b) + " of the page is shrunk to " + std::to_string(bits[b]) +
                   " bits; appends go to pages at their initial bits");
}

std::vector<uint16_t> random_half_rows(size_t n, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<uint16_t> v(n);
  for (auto& h : v) h = fp32_to_fp16(nd(rng));
  return v;
}

void append_host_segments(const PageFormat& f, const HostPage& p, int h, int pos0, std::vector<AttnSegment>& out) {
  const int d = f.head_dim, bk = 2 * h, bv = 2 * h + 1;
  const ComponentFormat &ck = f.blocks[bk], &cv = f.blocks[bv];
  const uint8_t* kd = p.bytes.data() + f.block_offset(p.bits.data(), bk);
  const uint8_t* vd = p.bytes.data() + f.block_offset(p.bits.data(), bv);
  for (int i = 0; i < p.filled; i += kMaxKernelRows) {
    AttnSegment g;
    g.pos0 = pos0 + i;
    g.n = std::min(kMaxKernelRows, p.filled - i);
    g.t0 = i;
    g.stride = (size_t)d;
    g.k_packed = !ck.spec.f16;
    g.v_packed = !cv.spec.f16;
    if (g.k_packed) g.k = {&ck.host_at[p.bits[bk]], kd, nullptr};
    else g.k16 = reinterpret_cast<const uint16_t*>(kd) + (size_t)i * d;
    if (g.v_packed) g.v = {&cv.host_at[p.bits[bv]], vd, nullptr};
    else g.v16 = reinterpret_cast<const uint16_t*>(vd) + (size_t)i * d;
    out.push_back(g);
  }
}

// ---- in-place shrink plan (shrink_moves.h) ------------------------------------------------------

std::vector<ShrinkMove> page_shrink_moves(const PageFormat& f, const uint8_t* from, const uint8_t* to) {
  std::vector<ShrinkMove> moves;
  for (int b = 0; b < f.n_blocks(); ++b) {
    const uint32_t src = f.block_offset(from, b), dst = f.block_offset(to, b);
    MPKV_ASSERT(dst <= src, "shrink moves: a block would move up");
    if (from[b] == to[b]) {
      if (src != dst) moves.push_back({src, dst, f.block_bytes(b, from[b]), 0});
      continue;
    }
    const ComponentFormat& c = f.blocks[b];
    MPKV_CHECK(!c.spec.f16 && 2 * to[b] == from[b] && to[b] >= c.spec.final_bits,
               "CUDA shrink: block " + std::to_string(b) + " cannot go from " + std::to_string(from[b]) + " to " +
                   std::to_string(to[b]) + " bits");
    const DeviceBlockLayout &ls = c.device_at[from[b]], &ld = c.device_at[to[b]];
    const uint32_t code_bytes = ls.scales_offset;  // codes start at 0 and end where scales begin
    moves.push_back({src, dst, code_bytes, to[b]});
    moves.push_back({src + ls.scales_offset, dst + ld.scales_offset, 4 * ls.n_params, 0});  // scales + zeros
  }
  return moves;
}

void run_shrink_moves(const std::vector<ShrinkMove>& moves, uint8_t* page, uint32_t chunk) {
  std::vector<uint8_t> tmp(chunk);
  for (const ShrinkMove& m : moves) {
    const uint32_t n = move_dst_bytes(m);
    for (uint32_t k0 = 0; k0 < n; k0 += chunk) {
      const uint32_t len = std::min(chunk, n - k0);
      for (uint32_t i = 0; i < len; ++i) tmp[i] = move_byte(m, page, k0 + i);
      std::memcpy(page + m.dst + k0, tmp.data(), len);
    }
  }
}

}  // namespace mpkv::cuda

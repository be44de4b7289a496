// Host side of the CUDA page store (src/cuda): the page format (byte-exact CPU pages), the in-place
// shrink plan the device kernel runs, the batch page table and the arena allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "cuda/arena_allocator.h"
#include "cuda/page_format.h"
#include "cuda/page_table.h"
#include "cuda/shrink_moves.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv::cuda {
namespace {

// Two KV heads with different plans: head 0 progressive uniform K and V (16 -> 2), head 1 KIVI
// keys (channel axis, 16 -> 4) and fp16 values.
PageFormat mixed_format(int P) {
  const ComponentSpec prog{false, GroupAxis::token, 64, 16, 2};
  const ComponentSpec kivi{false, GroupAxis::channel, 32, 16, 4};
  const ComponentSpec f16{true, GroupAxis::token, 0, 16, 16};
  return make_page_format(2, 64, P, {prog, prog, kivi, f16});
}

TEST(CudaPages, FormatRejectsWhatTheKernelsCannotRead) {
  const ComponentSpec u4{false, GroupAxis::token, 64, 4, 4};
  EXPECT_THROW(make_page_format(1, 48, 64, {u4, u4}), Error);   // head_dim % 32
  EXPECT_THROW(make_page_format(1, 512, 64, {u4, u4}), Error);  // > 256 channels
  const ComponentSpec bad{false, GroupAxis::token, 64, 4, 3};
  EXPECT_THROW(make_page_format(1, 64, 64, {bad, bad}), Error);  // 3 is off the ladder
  EXPECT_THROW(make_page_format(2, 64, 64, {u4, u4, u4}), Error);
  const ComponentSpec kivi{false, GroupAxis::channel, 48, 16, 4};
  EXPECT_THROW(make_page_format(1, 64, 64, {kivi, u4}), Error);  // 48 does not divide 64 tokens
  // 128 fp16 blocks of 65536 x 256 x 2 bytes: 4 GiB, one byte more than 32-bit offsets reach.
  const ComponentSpec f16{true, GroupAxis::token, 0, 16, 16};
  EXPECT_THROW(make_page_format(64, 256, 65536, {f16, f16}), Error);
  EXPECT_NO_THROW(make_page_format(64, 256, 65535, {f16, f16}));
}

TEST(CudaPages, BlockOffsetsFollowCurrentBits) {
  const PageFormat f = mixed_format(64);
  const std::vector<uint8_t> bits = {16, 8, 4, 16};
  EXPECT_EQ(f.block_offset(bits.data(), 0), 0u);
  EXPECT_EQ(f.block_offset(bits.data(), 1), f.block_bytes(0, 16));
  EXPECT_EQ(f.block_offset(bits.data(), 3), f.block_bytes(0, 16) + f.block_bytes(1, 8) + f.block_bytes(2, 4));
  EXPECT_EQ(f.block_bytes(3, 16), 64u * 64 * 2);
  // 2-bit codes with one fp16 scale and zero per 64-channel row: 16 + 4 bytes per token.
  EXPECT_EQ(f.block_bytes(0, 2), 64u * (16 + 4));
  EXPECT_EQ(f.token_granularity(), 32);
}

// Token groups of 24 and 32 tokens in one page: pages and appends must hold whole groups of both,
// so the granularity is 96 rows (their least common multiple, PagedKvCache's rule), not 32.
TEST(CudaPages, TokenGranularityIsTheLcmOfTheTokenGroups) {
  const ComponentSpec k24{false, GroupAxis::channel, 24, 4, 4}, k32{false, GroupAxis::channel, 32, 4, 4},
      u4{false, GroupAxis::token, 64, 4, 4};
  const PageFormat f = make_page_format(2, 64, 96, {k24, u4, k32, u4});
  ASSERT_EQ(f.token_granularity(), 96);
  const std::vector<uint16_t> k = random_half_rows(96 * 2 * 64, 1), v = random_half_rows(96 * 2 * 64, 2);
  EXPECT_THROW(write_host_page(f, k.data(), v.data(), 32), Error);  // a group of 24 and a third of one
  EXPECT_EQ(write_host_page(f, k.data(), v.data(), 96).filled, 96);
}

// The in-place plan gives the CPU shrink's bytes, for every chunk size the kernel might use, down
// the whole ladder (each step one halving of the blocks that can still shrink).
TEST(CudaPages, InPlaceShrinkMovesGiveTheCpuShrink) {
  const int P = 64;
  const PageFormat f = mixed_format(P);
  const std::vector<uint16_t> k = random_half_rows((size_t)P * 2 * 64, 1), v = random_half_rows((size_t)P * 2 * 64, 2);
  for (uint32_t chunk : {1u, 7u, 512u, 1u << 20}) {
    HostPage cpu = write_host_page(f, k.data(), v.data(), P);
    std::vector<uint8_t> inplace = cpu.bytes;
    for (int step = 0; step < 3; ++step) {
      std::vector<uint8_t> to = cpu.bits;
      for (int b = 0; b < f.n_blocks(); ++b)
        if (!f.blocks[b].spec.f16 && to[b] > f.blocks[b].spec.final_bits) to[b] /= 2;
      const std::vector<ShrinkMove> moves = page_shrink_moves(f, cpu.bits.data(), to.data());
      for (const ShrinkMove& m : moves) ASSERT_LE(m.dst, m.src);
      run_shrink_moves(moves, inplace.data(), chunk);
      shrink_host_page(f, cpu, to);
      ASSERT_EQ(std::vector<uint8_t>(inplace.begin(), inplace.begin() + cpu.bytes.size()), cpu.bytes)
          << "chunk " << chunk << " step " << step;
    }
    EXPECT_EQ(cpu.bits, (std::vector<uint8_t>{2, 2, 4, 16}));
  }
}

TEST(CudaPages, ShrinkMovesRejectStepsOffTheLadder) {
  const PageFormat f = mixed_format(64);
  const std::vector<uint8_t> from = {16, 16, 16, 16};
  EXPECT_THROW(page_shrink_moves(f, from.data(), std::vector<uint8_t>{4, 16, 16, 16}.data()), Error);  // two halvings
  EXPECT_THROW(page_shrink_moves(f, from.data(), std::vector<uint8_t>{16, 16, 16, 8}.data()), Error);  // fp16 block
  const std::vector<uint8_t> at4 = {2, 2, 4, 16};
  EXPECT_THROW(page_shrink_moves(f, at4.data(), std::vector<uint8_t>{1, 2, 4, 16}.data()), Error);  // below final
}

TEST(CudaPages, BatchTableHasFlashinferShapeAndSplitsEveryPageOnce) {
  std::vector<SequenceView> seqs(3);
  for (int i = 0; i < 10; ++i) seqs[0].page_slots.push_back(100 + i);
  seqs[0].last_page_len = 5;
  seqs[0].f16_rows = 7;
  seqs[1].f16_rows = 3;  // no pages yet
  seqs[2].page_slots = {7};
  seqs[2].last_page_len = 64;
  const BatchTable t = build_batch_table(seqs, 64, 4);
  EXPECT_EQ(t.page_indptr, (std::vector<int32_t>{0, 10, 10, 11}));
  EXPECT_EQ(t.last_page_len, (std::vector<int32_t>{5, 0, 64}));
  EXPECT_EQ(t.pages_per_item, 3);  // ceil(11 / 4)
  EXPECT_EQ(table_rows(t, 0, 64), 7 + 9 * 64 + 5);
  EXPECT_EQ(table_rows(t, 1, 64), 3);
  ASSERT_EQ(t.work_indptr.size(), 4u);
  std::multiset<int32_t> seen;
  for (size_t b = 0; b < seqs.size(); ++b) {
    int f16_items = 0;
    for (int i = t.work_indptr[b]; i < t.work_indptr[b + 1]; ++i) {
      const WorkItem& w = t.work[i];
      EXPECT_EQ(w.seq, (int)b);
      EXPECT_LE(w.page_end - w.page_begin, t.pages_per_item);
      f16_items += w.with_f16;
      for (int p = w.page_begin; p < w.page_end; ++p) seen.insert(t.page_indices[p]);
    }
    EXPECT_EQ(f16_items, 1);
    EXPECT_EQ(t.work[t.work_indptr[b]].with_f16, 1);
  }
  EXPECT_EQ(seen.size(), 11u);
  // 10 pages at 3 per item: 4 items of 2 or 3 pages (equal within one page), not 3, 3, 3, 1.
  EXPECT_EQ(t.work_indptr[1] - t.work_indptr[0], 4);
  for (int i = t.work_indptr[0]; i < t.work_indptr[1]; ++i) EXPECT_GE(t.work[i].page_end - t.work[i].page_begin, 2);
  EXPECT_EQ(std::set<int32_t>(seen.begin(), seen.end()).size(), 11u);
}

TEST(CudaPages, BatchTableRejectsEmptySequencesAndBadLastPage) {
  std::vector<SequenceView> seqs(1);
  EXPECT_THROW(build_batch_table(seqs, 64, 8), Error);
  seqs[0].page_slots = {1};
  seqs[0].last_page_len = 65;
  EXPECT_THROW(build_batch_table(seqs, 64, 8), Error);
  seqs[0].last_page_len = 0;
  EXPECT_THROW(build_batch_table(seqs, 64, 8), Error);
}

TEST(CudaPages, ArenaAllocatesFreesCoalescesAndShrinksInPlace) {
  ArenaAllocator a(4 * kArenaAlign);
  const auto x = a.allocate(1), y = a.allocate(kArenaAlign + 1), z = a.allocate(kArenaAlign);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, kArenaAlign);
  EXPECT_EQ(*z, 3 * kArenaAlign);
  EXPECT_EQ(a.used(), a.capacity());
  EXPECT_FALSE(a.allocate(1));
  a.shrink(*y, 10);  // gives back its second unit
  EXPECT_EQ(a.size_of(*y), kArenaAlign);
  const auto w = a.allocate(kArenaAlign);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 2 * kArenaAlign);
  a.free(*x);
  a.free(*y);
  a.free(*w);  // x, y, w coalesce into three units before z
  const auto big = a.allocate(3 * kArenaAlign);
  ASSERT_TRUE(big);
  EXPECT_EQ(*big, 0u);
  EXPECT_THROW(a.free(12345), Error);
  EXPECT_THROW(a.shrink(*z, 2 * kArenaAlign), Error);
  EXPECT_THROW(a.allocate(0), Error);
}

}  // namespace
}  // namespace mpkv::cuda

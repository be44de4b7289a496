// The append and decode attention kernels' algorithms, run on the CPU (src/cuda/decode_host.h: the kernels' own
// row indexing, page table, work split, per-warp online softmax and merges; only the lanes and
// shuffles are left out), against the CPU reference (attend_segments over the same pages).
// The device test (tests/cuda) checks the kernels themselves against the same reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/decode_host.h"
#include "cuda/page_table.h"
#include "support/decode_reference.h"
#include "util/error.h"

namespace mpkv::cuda {
namespace {

// Summation order differs from the reference (per-warp partials, then merges): a few ulp per step.
constexpr float kDecodeTol = 2e-4f;

float worst_error(const NamedFormat& nf, int n_head, const std::vector<SeqCase>& cases, int target_items) {
  const DecodeScenario sc = make_decode_scenario(nf.f, n_head, cases, 100);
  HostStore store(nf.f);
  const BatchTable t = build_batch_table(place_scenario(store, sc), nf.f.page_tokens, target_items);
  return worst_relative_error(decode_on_host(store, t, n_head, sc.q), sc.want);
}

TEST(CudaDecodeHost, MatchesTheCpuReferenceOneItemPerSequence) {
  for (const NamedFormat& nf : decode_test_formats(2, 64, 64))
    EXPECT_LE(worst_error(nf, 6, decode_test_batch(), 1), kDecodeTol) << nf.name;
}

TEST(CudaDecodeHost, MatchesTheCpuReferenceSplitIntoPageItems) {
  for (const NamedFormat& nf : decode_test_formats(2, 64, 64))
    EXPECT_LE(worst_error(nf, 6, decode_test_batch(), 1000), kDecodeTol) << nf.name;
}

TEST(CudaDecodeHost, MatchesAtHeadDim128AndGroup8) {
  for (const NamedFormat& nf : decode_test_formats(1, 128, 64))
    EXPECT_LE(worst_error(nf, 8, {{1, 4, 64, 30, 2}, {2, 2, 32, 5, 1}}, 3), kDecodeTol) << nf.name;
}

// The append kernel's units write the CPU quantizer's bytes (two tasks into one page, the second
// from input rows 32..63, as the device test does).
TEST(CudaAppendHost, UnitsWriteTheCpuQuantizersBytes) {
  const int nkv = 2, d = 64, P = 64;
  for (const NamedFormat& nf : decode_test_formats(nkv, d, P)) {
    const std::vector<uint16_t> k = random_half_rows((size_t)P * nkv * d, 1), v = random_half_rows((size_t)P * nkv * d, 2);
    HostStore store(nf.f);
    store.new_page();  // a neighbour, so the page under test does not start at offset 0
    const int slot = store.new_page();
    append_on_host(store, {{slot, 0, 32, 0}, {slot, 32, 32, 32}}, k.data(), v.data(), P);
    EXPECT_EQ(store.page(slot, P).bytes, write_host_page(nf.f, k.data(), v.data(), P).bytes) << nf.name;
  }
}

// Tasks are checked as the device store checks them: page rows in whole token groups of every block
// (groups of 24 and 32 tokens: multiples of 96), input rows inside the input, and pages still at
// their initial bits (a shrunk block's layout has the ladder factor in scale_mult; freshly quantized
// scales do not, so appended codes would decode 17 times too large at 8 -> 4 bits).
TEST(CudaAppendHost, RejectsSplitTokenGroupsShortInputsAndShrunkPages) {
  const int d = 64, P = 96;
  const ComponentSpec k24{false, GroupAxis::channel, 24, 4, 4}, k32{false, GroupAxis::channel, 32, 4, 4},
      u{false, GroupAxis::token, d, 8, 2};
  const PageFormat f = make_page_format(2, d, P, {k24, u, k32, u});
  // Twice the rows the calls say the input has, so no call below reads past the vectors.
  const std::vector<uint16_t> k = random_half_rows((size_t)2 * P * 2 * d, 1), v = random_half_rows((size_t)2 * P * 2 * d, 2);
  HostStore store(f);
  const int slot = store.new_page();
  EXPECT_THROW(append_on_host(store, {{slot, 32, 32, 0}}, k.data(), v.data(), P), Error);  // splits a group of 24
  EXPECT_THROW(append_on_host(store, {{slot, 0, 96, 1}}, k.data(), v.data(), P), Error);   // input rows 1 .. 96 of 96
  HostPage shrunk = write_host_page(f, k.data(), v.data(), P);
  shrink_host_page(f, shrunk, halved_bits(f, shrunk.bits));
  const int shrunk_slot = store.upload_page(shrunk);
  EXPECT_THROW(append_on_host(store, {{shrunk_slot, 0, 96, 0}}, k.data(), v.data(), P), Error);
  append_on_host(store, {{slot, 0, 96, 0}}, k.data(), v.data(), P);
  EXPECT_EQ(store.page(slot, P).bytes, write_host_page(f, k.data(), v.data(), P).bytes);
}

}  // namespace
}  // namespace mpkv::cuda

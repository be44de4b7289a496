// The append and decode attention kernels' algorithms, run on the CPU (src/cuda/decode_host.h: the kernels' own
// row indexing, page table, work split, per-warp online softmax and merges; only the lanes and
// shuffles are left out), against the CPU reference (attend_segments over the same pages).
// The device test (tests/cuda) checks the kernels themselves against the same reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/decode_host.h"
#include "cuda/decode_reference.h"
#include "cuda/page_table.h"

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
    append_on_host(store, {{slot, 0, 32, 0}, {slot, 32, 32, 32}}, k.data(), v.data());
    EXPECT_EQ(store.page(slot, P).bytes, write_host_page(nf.f, k.data(), v.data(), P).bytes) << nf.name;
  }
}

}  // namespace
}  // namespace mpkv::cuda

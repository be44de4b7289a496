// The CUDA kernels against the CPU reference on the same pages (docs/cuda.md, "Verification").
// Every test skips when no CUDA device is present (this binary is built wherever nvcc is, run
// for real by scripts/device_check.sh on a GPU machine).
//
// Tolerances, by what may differ:
//   fp16 conversions, group parameters, append, shrink: none (the same integer / IEEE-rounded
//     operations; bytes must be identical)
//   decode attention: the CPU reference (attend_segments with the scalar kernels) and the device
//     sum the same dequantized values in other orders, and expf differs from std::exp by a few
//     ulp: |device - cpu| <= kDecodeTol * (1 + |cpu|).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "attention/paged_attention.h"
#include "cuda/device/device_buffer.h"
#include "cuda/device/device_page_store.h"
#include "cuda/device/kernels.h"
#include "cuda/page_format.h"
#include "cuda/page_table.h"
#include "quant/uniform_params.h"
#include "support/decode_reference.h"
#include "util/fp16.h"

namespace mpkv::cuda {
namespace {

constexpr float kDecodeTol = 2e-4f;
constexpr uint64_t kArenaBytes = 256ull << 20;

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

bool same_half_result(uint16_t a, uint16_t b) {
  const bool na = (a & 0x7c00u) == 0x7c00u && (a & 0x3ffu), nb = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu);
  return na || nb ? na == nb : a == b;  // NaN payloads may differ
}

TEST_F(CudaDevice, HalfConversionsMatchTheHost) {
  const std::vector<float> dev = device_half_to_float_all();
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = fp16_to_fp32((uint16_t)h);
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(dev[h])) << h;
    else ASSERT_EQ(fp32_to_bits(dev[h]), fp32_to_bits(want)) << h;
  }
  std::vector<float> x;
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) x.push_back(fp32_from_bits(bits(rng)));
  for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, -65520.0f, 5.96e-8f, 2.98e-8f, 1e-30f, -1e-30f}) x.push_back(f);
  std::vector<uint16_t> rn, down, up;
  device_float_to_half(x, rn, down, up);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(same_half_result(rn[i], fp32_to_fp16(x[i]))) << x[i];
    if (std::isnan(x[i])) continue;
    ASSERT_EQ(down[i], fp16_round_down(x[i])) << x[i];
    ASSERT_EQ(up[i], fp16_round_up(x[i])) << x[i];
  }
}

TEST_F(CudaDevice, GroupParamsMatchTheHost) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-8.0f, 5.0f);
  std::vector<float> lo, hi;
  for (int i = 0; i < 100000; ++i) {
    float a = nd(rng) * std::pow(10.0f, mag(rng)), b = nd(rng) * std::pow(10.0f, mag(rng));
    lo.push_back(std::min(a, b));
    hi.push_back(std::max(a, b));
  }
  for (int bits : {1, 2, 3, 4, 8, 16}) {
    std::vector<uint16_t> s, z;
    device_group_params(lo, hi, bits, s, z);
    for (size_t i = 0; i < lo.size(); ++i) {
      const UniformGroupParams want = uniform_group_params(lo[i], hi[i], bits);
      ASSERT_EQ(s[i], want.scale_h) << lo[i] << " " << hi[i] << " bits " << bits;
      ASSERT_EQ(z[i], want.zero_h) << lo[i] << " " << hi[i] << " bits " << bits;
    }
  }
}

TEST_F(CudaDevice, AppendWritesTheCpuQuantizersBytes) {
  const int nkv = 2, d = 64, P = 64;
  for (const NamedFormat& nf : decode_test_formats(nkv, d, P)) {
    const PageFormat& f = nf.f;
    const std::vector<uint16_t> k = random_half_rows((size_t)P * nkv * d, 1), v = random_half_rows((size_t)P * nkv * d, 2);
    const HostPage want = write_host_page(f, k.data(), v.data(), P);
    DevicePageStore store(f, kArenaBytes);
    const int slot = store.new_page();
    // Two appends of 32 rows (whole KIVI token groups), the second from input rows 32..63.
    store.append({{slot, 0, 32, 0}, {slot, 32, 32, 32}}, k.data(), v.data(), P);
    const HostPage got = store.download_page(slot, P);
    EXPECT_EQ(got.bytes, want.bytes) << nf.name;
  }
}

TEST_F(CudaDevice, InPlaceShrinkGivesTheCpuShrinksBytes) {
  const int nkv = 3, d = 64, P = 64;
  const ComponentSpec prog{false, GroupAxis::token, d, 16, 1}, kprog{false, GroupAxis::channel, 32, 16, 2},
      f16{true, GroupAxis::token, 0, 16, 16};
  const PageFormat f = make_page_format(nkv, d, P, {prog, prog, kprog, f16, f16, prog});
  std::vector<HostPage> cpu;
  DevicePageStore store(f, kArenaBytes);
  std::vector<int> slots;
  for (int i = 0; i < 5; ++i) {
    const std::vector<uint16_t> k = random_half_rows((size_t)P * nkv * d, 10 + i), v = random_half_rows((size_t)P * nkv * d, 20 + i);
    cpu.push_back(write_host_page(f, k.data(), v.data(), P));
    slots.push_back(store.upload_page(cpu.back()));
  }
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<uint8_t>> to;
    for (HostPage& p : cpu) {
      to.push_back(halved_bits(f, p.bits));
      shrink_host_page(f, p, to.back());
    }
    const uint64_t before = store.arena_used();
    DevicePageStore::PreparedShrink s = store.prepare_shrink(slots, to);
    store.run_shrink(s);
    store.commit_shrink(s);
    EXPECT_LT(store.arena_used(), before);
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(store.download_page(slots[i], P).bytes, cpu[i].bytes) << step;
  }
}

// Pages written and shrunk on the host (make_decode_scenario), uploaded byte for byte, attended on
// the device, compared with the CPU reference.
void check_decode(int nkv, int n_head, int d, int P, const std::vector<SeqCase>& cases, int target_items) {
  for (const NamedFormat& nf : decode_test_formats(nkv, d, P)) {
    const PageFormat& f = nf.f;
    const DecodeScenario sc = make_decode_scenario(f, n_head, cases, 100);
    DevicePageStore store(f, kArenaBytes);
    const std::vector<SequenceView> views = place_scenario(store, sc);
    DecodeStep step(store, build_batch_table(views, P, target_items), n_head);
    step.set_queries(sc.q);
    step.run();
    EXPECT_LE(worst_relative_error(step.output(), sc.want), kDecodeTol) << nf.name << " (" << step.n_work() << " work items)";
  }
}

TEST_F(CudaDevice, DecodeMatchesTheCpuReferenceOneItemPerSequence) { check_decode(2, 6, 64, 64, decode_test_batch(), 1); }

TEST_F(CudaDevice, DecodeMatchesTheCpuReferenceSplitIntoPageItems) { check_decode(2, 6, 64, 64, decode_test_batch(), 1000); }

TEST_F(CudaDevice, DecodeMatchesAtHeadDim128AndGroup8) {
  check_decode(1, 8, 128, 64, {{1, 4, 64, 30, 2}, {2, 2, 32, 5, 1}}, 3);
}

}  // namespace
}  // namespace mpkv::cuda

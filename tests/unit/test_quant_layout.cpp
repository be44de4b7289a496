// Packed formats, the block layout descriptor, and options validation.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "quant/kv_block_layout.h"
#include "quant/kv_quantizer.h"
#include "quant/quant_options.h"
#include "util/error.h"

namespace mpkv {
namespace {

TEST(KvBlockLayout, SectionsAndBitsPerElement) {
  // 4-bit, head_dim 64, 16 tokens, per-token G = 64: codes 16 * 32 B, then 16 fp16 scales, 16 fp16 zeros.
  const KvBlockLayout L = make_kv_block_layout(Codec::uniform, GroupAxis::token, 4, 64, 16, 64);
  EXPECT_EQ(L.row_bytes, 32u);
  EXPECT_EQ(L.codes_offset, 0u);
  EXPECT_EQ(L.codes_bytes, 512u);
  EXPECT_EQ(L.n_params, 16u);
  EXPECT_EQ(L.scales_offset, 512u);
  EXPECT_EQ(L.zeros_offset, 544u);
  EXPECT_EQ(L.bytes, 576u);
  EXPECT_DOUBLE_EQ(L.bits_per_element(), 4.5);  // fp16 S and Z at G = 64 add 0.5 bit

  const KvBlockLayout l3 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 3, 64, 2, 32);
  EXPECT_EQ(l3.row_bytes, 24u);  // 8 codes in 3 bytes
  EXPECT_EQ(l3.n_params, 4u);    // 2 groups per token
  EXPECT_DOUBLE_EQ(l3.bits_per_element(), 3.0 + 32.0 / 32);

  // KIVI keys: per channel, groups of 32 tokens: params [tokens / 32][head_dim].
  const KvBlockLayout lk = make_kv_block_layout(Codec::uniform, GroupAxis::channel, 2, 64, 64, 32);
  EXPECT_EQ(lk.n_params, 128u);
  EXPECT_EQ(lk.param_index(33, 5), 64u + 5u);
  EXPECT_DOUBLE_EQ(lk.bits_per_element(), 2.0 + 32.0 / 32);

  // Turbo: one fp16 norm per token, no zeros.
  const KvBlockLayout lt = make_kv_block_layout(Codec::lloyd_max, GroupAxis::token, 3, 128, 10, 128);
  EXPECT_EQ(lt.n_params, 10u);
  EXPECT_EQ(lt.n_zeros, 0u);
  EXPECT_EQ(lt.bytes, 10u * 48u + 20u);
}

TEST(KvBlockLayout, OffsetOf) {
  const KvBlockLayout l3 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 3, 64, 4, 64);
  EXPECT_EQ(l3.offset_of(0, 5).byte, 1u);  // bit 15: byte 1, shift 7, straddles into byte 2
  EXPECT_EQ(l3.offset_of(0, 5).shift, 7);
  EXPECT_EQ(l3.offset_of(0, 8).byte, 3u);
  EXPECT_EQ(l3.offset_of(2, 8).byte, 2 * 24u + 3u);
  const KvBlockLayout l16 = make_kv_block_layout(Codec::uniform, GroupAxis::token, 16, 64, 4, 32);
  EXPECT_EQ(l16.offset_of(1, 3).byte, 128u + 6u);
  EXPECT_EQ(l16.param_index(1, 40), 3u);
}

// Byte images of each packed format, written out by hand from the documented bit order.
TEST(KvBlockLayout, PackedBytesMatchTheDocumentedFormat) {
  auto row = [](int bits, const std::vector<uint32_t>& codes) {
    const KvBlockLayout L = make_kv_block_layout(Codec::uniform, GroupAxis::token, bits, 8, 1, 8);
    std::vector<uint8_t> b(L.bytes, 0);
    for (int c = 0; c < 8; ++c) set_code(L, b.data(), 0, c, codes[(size_t)c]);
    return std::vector<uint8_t>(b.begin(), b.begin() + (long)L.row_bytes);
  };
  EXPECT_EQ(row(1, {1, 0, 1, 1, 0, 0, 0, 1}), (std::vector<uint8_t>{0x8D}));
  EXPECT_EQ(row(2, {0, 1, 2, 3, 3, 2, 1, 0}), (std::vector<uint8_t>{0xE4, 0x1B}));
  EXPECT_EQ(row(3, {0, 1, 2, 3, 4, 5, 6, 7}), (std::vector<uint8_t>{0x88, 0xC6, 0xFA}));
  EXPECT_EQ(row(4, {1, 2, 3, 4, 5, 6, 7, 15}), (std::vector<uint8_t>{0x21, 0x43, 0x65, 0xF7}));
  EXPECT_EQ(row(8, {1, 2, 3, 4, 5, 6, 7, 255}), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 255}));
  EXPECT_EQ(row(16, {0x1234, 2, 3, 4, 5, 6, 7, 0xFFFF}),
            (std::vector<uint8_t>{0x34, 0x12, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 0xFF, 0xFF}));
}

TEST(KvBlockLayout, SetGetRoundTripWithoutTouchingNeighbours) {
  std::mt19937 rng(1);
  for (int bits : {1, 2, 3, 4, 8, 16}) {
    const KvBlockLayout L = make_kv_block_layout(Codec::uniform, GroupAxis::token, bits, 64, 5, 64);
    std::vector<uint8_t> b(L.bytes, 0);
    std::vector<uint32_t> want((size_t)5 * 64);
    for (int t = 0; t < 5; ++t)
      for (int c = 0; c < 64; ++c) {
        want[(size_t)t * 64 + c] = rng() & ((1u << bits) - 1);
        set_code(L, b.data(), t, c, want[(size_t)t * 64 + c]);
      }
    // overwrite every other code a second time; the others must survive
    for (int t = 0; t < 5; ++t)
      for (int c = 0; c < 64; c += 2) {
        want[(size_t)t * 64 + c] ^= 1u;
        set_code(L, b.data(), t, c, want[(size_t)t * 64 + c]);
      }
    for (int t = 0; t < 5; ++t)
      for (int c = 0; c < 64; ++c) ASSERT_EQ(get_code(L, b.data(), t, c), want[(size_t)t * 64 + c]) << bits;
    // the codes section alone was written
    for (size_t i = L.codes_bytes; i < L.bytes; ++i) ASSERT_EQ(b[i], 0) << bits;
  }
}

void expect_error_mentions(const QuantOptions& o, const std::string& needle) {
  try {
    validate(o);
    FAIL() << "validate accepted options that should fail (" << needle << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(QuantOptions, ValidateRejectsBadOptionsWithAClearMessage) {
  QuantOptions o;
  EXPECT_NO_THROW(validate(o));
  o.bits = 5;
  expect_error_mentions(o, "unsupported bits 5");
  o = QuantOptions{};
  o.bits = 0;
  expect_error_mentions(o, "unsupported bits 0");
  o = QuantOptions{QuantMethod::uniform, KvRole::key, 4, 64, 48};
  expect_error_mentions(o, "does not divide head_dim");
  o = QuantOptions{QuantMethod::uniform, KvRole::value, 4, 64, 4};
  expect_error_mentions(o, "multiple of 8");
  o = QuantOptions{QuantMethod::rotated, KvRole::key, 4, 96, 0};
  expect_error_mentions(o, "power-of-two head_dim");
  o = QuantOptions{QuantMethod::turbo, KvRole::key, 8, 64, 0};
  expect_error_mentions(o, "turbo");
  o = QuantOptions{QuantMethod::turbo, KvRole::key, 2, 48, 0};
  expect_error_mentions(o, "power-of-two");
  o = QuantOptions{QuantMethod::uniform, KvRole::key, 4, 0, 0};
  expect_error_mentions(o, "head_dim 0");
  o = QuantOptions{QuantMethod::uniform, KvRole::key, 4, 12, 0};
  expect_error_mentions(o, "multiple of 8");
  o = QuantOptions{QuantMethod::uniform, KvRole::key, 4, 64, -1};
  expect_error_mentions(o, "negative");
  // KIVI keys group tokens: any positive token group is fine; values group channels.
  EXPECT_NO_THROW(validate({QuantMethod::kivi, KvRole::key, 2, 64, 48}));
  expect_error_mentions({QuantMethod::kivi, KvRole::value, 2, 64, 48}, "does not divide head_dim");
  // rotated on a power-of-two head_dim, 3-bit, 1-bit, 16-bit are all fine
  for (int b : {1, 2, 3, 4, 8, 16}) EXPECT_NO_THROW(validate({QuantMethod::rotated, KvRole::key, b, 128, 0}));
  // the quantizer validates at construction
  EXPECT_THROW(KvQuantizer({QuantMethod::uniform, KvRole::key, 6, 64, 0}), Error);
}

TEST(QuantOptions, DefaultsAndNames) {
  EXPECT_EQ(effective_group({QuantMethod::uniform, KvRole::key, 4, 128, 0}), 128);
  EXPECT_EQ(effective_group({QuantMethod::kivi, KvRole::key, 2, 128, 0}), kKiviDefaultGroup);
  EXPECT_EQ(effective_group({QuantMethod::kivi, KvRole::value, 2, 128, 0}), 128);
  for (QuantMethod m : {QuantMethod::uniform, QuantMethod::kivi, QuantMethod::rotated, QuantMethod::turbo})
    EXPECT_EQ(parse_method(method_name(m)), m);
  EXPECT_THROW(parse_method("kivi2"), Error);
  EXPECT_EQ(parse_role("v"), KvRole::value);
  EXPECT_THROW(parse_role("q"), Error);
}

TEST(KvBlockLayout, RejectsBadShapesAndRanges) {
  EXPECT_THROW(make_kv_block_layout(Codec::uniform, GroupAxis::channel, 2, 64, 40, 32), Error);  // 40 % 32
  EXPECT_THROW(make_kv_block_layout(Codec::uniform, GroupAxis::token, 6, 64, 4, 64), Error);
  EXPECT_THROW(make_kv_block_layout(Codec::lloyd_max, GroupAxis::token, 8, 64, 4, 64), Error);
  EXPECT_THROW(make_kv_block_layout(Codec::uniform, GroupAxis::token, 4, 64, 0, 64), Error);
  const KvBlockLayout lk = make_kv_block_layout(Codec::uniform, GroupAxis::channel, 2, 64, 64, 32);
  EXPECT_NO_THROW(check_token_range(lk, 32, 32));
  EXPECT_THROW(check_token_range(lk, 16, 32), Error);
  EXPECT_THROW(check_token_range(lk, 32, 64), Error);
  const KvBlockLayout lt = make_kv_block_layout(Codec::uniform, GroupAxis::token, 4, 64, 8, 64);
  EXPECT_NO_THROW(check_token_range(lt, 3, 5));
  EXPECT_THROW(check_token_range(lt, -1, 2), Error);
  EXPECT_THROW(check_token_range(lt, 4, 5), Error);
}

}  // namespace
}  // namespace mpkv

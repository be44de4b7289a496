// Dequantizers on hand-built blocks. Every expected value is worked out by hand from the ggml
// format definition (written next to it), never by calling the code under test.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gguf/dequant.h"
#include "gguf/ggml_types.h"
#include "util/error.h"

namespace mpkv {
namespace {

// fp16 bit patterns used below.
constexpr uint16_t kH_0_25 = 0x3400, kH_0_5 = 0x3800, kH_1 = 0x3C00, kH_2 = 0x4000,
                   kH_m1 = 0xBC00, kH_m2 = 0xC000;

// The hand-worked values are exact in float (small integers times powers of two), so the tests
// require exact equality: there is no tolerance to name.
template <typename Block>
std::vector<float> deq(GgmlType t, const std::vector<Block>& blocks, int per_block) {
  std::vector<float> y(blocks.size() * per_block, -12345.0f);
  dequantize_row(t, blocks.data(), y.data(), (int64_t)y.size());
  return y;
}

TEST(GgufDequant, TypeTableMatchesBlockStructs) {
  EXPECT_EQ(ggml_type_info(2)->type_size, sizeof(BlockQ4_0));
  EXPECT_EQ(ggml_type_info(3)->type_size, sizeof(BlockQ4_1));
  EXPECT_EQ(ggml_type_info(6)->type_size, sizeof(BlockQ5_0));
  EXPECT_EQ(ggml_type_info(7)->type_size, sizeof(BlockQ5_1));
  EXPECT_EQ(ggml_type_info(8)->type_size, sizeof(BlockQ8_0));
  EXPECT_EQ(ggml_type_info(12)->type_size, sizeof(BlockQ4_K));
  EXPECT_EQ(ggml_type_info(13)->type_size, sizeof(BlockQ5_K));
  EXPECT_EQ(ggml_type_info(14)->type_size, sizeof(BlockQ6_K));
  // Values from ggml's type_traits.
  EXPECT_EQ(ggml_type_info(30)->type_size, 2u);
  EXPECT_STREQ(ggml_type_info(30)->name, "BF16");
  EXPECT_EQ(ggml_type_info(23)->type_size, 136u);  // IQ4_XS
  EXPECT_EQ(ggml_type_info(23)->block_size, 256);
  EXPECT_FALSE(ggml_type_info(10)->supported);  // Q2_K
  EXPECT_EQ(ggml_type_info(4), nullptr);        // removed Q4_2
  EXPECT_EQ(ggml_type_info(31), nullptr);
  EXPECT_EQ(ggml_type_name(99), "unknown ggml type 99");
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_1, 576), 18u * 20u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 512), 2u * 210u);
  EXPECT_THROW(ggml_row_bytes(GgmlType::Q8_0, 33), Error);
  EXPECT_THROW(ggml_row_bytes(GgmlType::F64, int64_t{1} << 62), Error);  // 2^65 bytes overflows
  EXPECT_THROW(ggml_row_bytes(static_cast<GgmlType>(5), 32), Error);
}

TEST(GgufDequant, RejectsUnsupportedTypeAndPartialBlock) {
  std::vector<uint8_t> buf(1024);
  std::vector<float> y(256);
  EXPECT_THROW(dequantize_row(GgmlType::Q2_K, buf.data(), y.data(), 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_0, buf.data(), y.data(), 31), Error);
  EXPECT_THROW(dequantize_row(static_cast<GgmlType>(77), buf.data(), y.data(), 32), Error);
}

TEST(GgufDequant, F32F16BF16) {
  const float f[3] = {1.5f, -0.0f, 3.25e-7f};
  float y[3];
  dequantize_row(GgmlType::F32, f, y, 3);
  EXPECT_EQ(std::memcmp(f, y, sizeof f), 0);

  // fp16: sign 1, exponent 5, mantissa 10, bias 15.
  const uint16_t h[6] = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7BFF, 0x0000};
  float yh[6];
  dequantize_row(GgmlType::F16, h, yh, 6);
  EXPECT_EQ(yh[0], 1.0f);
  EXPECT_EQ(yh[1], -2.0f);
  EXPECT_EQ(yh[2], 0.333251953125f);  // exponent 13 -> 2^-2; mantissa 0x155: 0.25 * (1 + 341/1024)
  EXPECT_EQ(yh[3], 5.9604644775390625e-08f);  // smallest subnormal 2^-24
  EXPECT_EQ(yh[4], 65504.0f);                 // largest finite half
  EXPECT_EQ(yh[5], 0.0f);

  // bf16: the top 16 bits of an fp32.
  const uint16_t b[3] = {0x3F80, 0xC040, 0x4049};
  float yb[3];
  dequantize_row(GgmlType::BF16, b, yb, 3);
  EXPECT_EQ(yb[0], 1.0f);
  EXPECT_EQ(yb[1], -3.0f);
  EXPECT_EQ(yb[2], 3.140625f);  // 2^1 * (1 + 0x49/128)
}

TEST(GgufDequant, Q4_0) {
  std::vector<BlockQ4_0> b(2);
  b[0].d = kH_0_5;
  std::memset(b[0].qs, 0x88, sizeof b[0].qs);  // q = 8 -> 0
  b[0].qs[0] = 0x3A;  // weight 0: q=10, weight 16: q=3
  b[0].qs[5] = 0x0F;  // weight 5: q=15, weight 21: q=0
  b[1].d = kH_m1;
  std::memset(b[1].qs, 0x88, sizeof b[1].qs);
  b[1].qs[15] = 0x71;  // weight 32+15: q=1, weight 32+31: q=7
  const auto y = deq(GgmlType::Q4_0, b, 32);
  EXPECT_EQ(y[0], 0.5f * (10 - 8));
  EXPECT_EQ(y[16], 0.5f * (3 - 8));
  EXPECT_EQ(y[5], 0.5f * (15 - 8));
  EXPECT_EQ(y[21], 0.5f * (0 - 8));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[47], -1.0f * (1 - 8));
  EXPECT_EQ(y[63], -1.0f * (7 - 8));
  EXPECT_EQ(y[32], 0.0f);
}

TEST(GgufDequant, Q4_1) {
  std::vector<BlockQ4_1> b(1);
  b[0].d = kH_0_5;
  b[0].m = kH_m2;
  std::memset(b[0].qs, 0, sizeof b[0].qs);
  b[0].qs[0] = 0x3A;   // weight 0: q=10, weight 16: q=3
  b[0].qs[15] = 0xF7;  // weight 15: q=7, weight 31: q=15
  const auto y = deq(GgmlType::Q4_1, b, 32);
  EXPECT_EQ(y[0], 0.5f * 10 - 2);
  EXPECT_EQ(y[16], 0.5f * 3 - 2);
  EXPECT_EQ(y[15], 0.5f * 7 - 2);
  EXPECT_EQ(y[31], 0.5f * 15 - 2);
  EXPECT_EQ(y[1], -2.0f);
}

// qh bits 0, 17 and 31 set: bytes (little-endian u32) 01 00 02 80.
constexpr uint8_t kQh5[4] = {0x01, 0x00, 0x02, 0x80};

TEST(GgufDequant, Q5_0) {
  std::vector<BlockQ5_0> b(1);
  b[0].d = kH_0_5;
  std::memcpy(b[0].qh, kQh5, 4);
  std::memset(b[0].qs, 0, sizeof b[0].qs);
  b[0].qs[0] = 0x3A;   // weight 0: 10 | 16 (bit 0) = 26; weight 16: 3 (bit 16 clear)
  b[0].qs[1] = 0x25;   // weight 1: 5 (bit 1 clear); weight 17: 2 | 16 (bit 17) = 18
  b[0].qs[15] = 0xF0;  // weight 15: 0; weight 31: 15 | 16 (bit 31) = 31
  const auto y = deq(GgmlType::Q5_0, b, 32);
  EXPECT_EQ(y[0], 0.5f * (26 - 16));
  EXPECT_EQ(y[16], 0.5f * (3 - 16));
  EXPECT_EQ(y[1], 0.5f * (5 - 16));
  EXPECT_EQ(y[17], 0.5f * (18 - 16));
  EXPECT_EQ(y[15], 0.5f * (0 - 16));
  EXPECT_EQ(y[31], 0.5f * (31 - 16));
  EXPECT_EQ(y[2], 0.5f * (0 - 16));
}

TEST(GgufDequant, Q5_1) {
  std::vector<BlockQ5_1> b(1);
  b[0].d = kH_0_25;
  b[0].m = kH_1;
  std::memcpy(b[0].qh, kQh5, 4);
  std::memset(b[0].qs, 0, sizeof b[0].qs);
  b[0].qs[0] = 0x3A;
  b[0].qs[1] = 0x25;
  b[0].qs[15] = 0xF0;
  const auto y = deq(GgmlType::Q5_1, b, 32);
  EXPECT_EQ(y[0], 0.25f * 26 + 1);
  EXPECT_EQ(y[16], 0.25f * 3 + 1);
  EXPECT_EQ(y[1], 0.25f * 5 + 1);
  EXPECT_EQ(y[17], 0.25f * 18 + 1);
  EXPECT_EQ(y[15], 1.0f);
  EXPECT_EQ(y[31], 0.25f * 31 + 1);
}

TEST(GgufDequant, Q8_0) {
  std::vector<BlockQ8_0> b(2);
  b[0].d = kH_0_5;
  b[1].d = kH_2;
  std::memset(b[0].qs, 0, sizeof b[0].qs);
  std::memset(b[1].qs, 1, sizeof b[1].qs);
  b[0].qs[0] = -128;
  b[0].qs[31] = 127;
  b[0].qs[7] = -3;
  b[1].qs[4] = -7;
  const auto y = deq(GgmlType::Q8_0, b, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[31], 63.5f);
  EXPECT_EQ(y[7], -1.5f);
  EXPECT_EQ(y[8], 0.0f);
  EXPECT_EQ(y[32 + 4], -14.0f);
  EXPECT_EQ(y[63], 2.0f);
}

// K-quant 6-bit scales/mins for the 8 sub-blocks of 32:
//   sc = {1, 2, 3, 63, 17, 5, 40, 33}, m = {0, 4, 10, 1, 20, 7, 63, 48}
// packed by hand:
//   bytes 0-3:  sc[j] | (sc[j+4] >> 4) << 6 : 1|1<<6=0x41, 2|0=0x02, 3|2<<6=0x83, 63|2<<6=0xBF
//   bytes 4-7:  m[j]  | (m[j+4] >> 4) << 6  : 0|1<<6=0x40, 4|0=0x04, 10|3<<6=0xCA, 1|3<<6=0xC1
//   bytes 8-11: (sc[j+4] & 15) | (m[j+4] & 15) << 4 : 1|4<<4=0x41, 5|7<<4=0x75, 8|15<<4=0xF8, 1|0=0x01
constexpr uint8_t kKScales[12] = {0x41, 0x02, 0x83, 0xBF, 0x40, 0x04, 0xCA, 0xC1, 0x41, 0x75, 0xF8, 0x01};

// Q4_K nibbles: sub-block 2c weight l = qs[32c + l] & 15, sub-block 2c+1 weight l = qs[32c + l] >> 4.
void fill_q4k_qs(uint8_t* qs) {
  std::memset(qs, 0, QK_K / 2);
  qs[0] = 0x5F;   // weight 0 (sub 0): 15;    weight 32 (sub 1): 5
  qs[39] = 0x9C;  // weight 71 (sub 2): 12;   weight 103 (sub 3): 9
  qs[95] = 0x2E;  // weight 159 (sub 4): 14;  weight 191 (sub 5): 2
  qs[96] = 0xF1;  // weight 192 (sub 6): 1;   weight 224 (sub 7): 15
}

TEST(GgufDequant, Q4_K) {
  std::vector<BlockQ4_K> b(1);
  b[0].d = kH_0_5;
  b[0].dmin = kH_0_25;
  std::memcpy(b[0].scales, kKScales, 12);
  fill_q4k_qs(b[0].qs);
  const auto y = deq(GgmlType::Q4_K, b, QK_K);
  // x = d * sc[s] * q - dmin * m[s]
  EXPECT_EQ(y[0], 0.5f * 1 * 15 - 0.25f * 0);
  EXPECT_EQ(y[32], 0.5f * 2 * 5 - 0.25f * 4);
  EXPECT_EQ(y[33], 0.5f * 2 * 0 - 0.25f * 4);
  EXPECT_EQ(y[71], 0.5f * 3 * 12 - 0.25f * 10);
  EXPECT_EQ(y[103], 0.5f * 63 * 9 - 0.25f * 1);
  EXPECT_EQ(y[159], 0.5f * 17 * 14 - 0.25f * 20);
  EXPECT_EQ(y[191], 0.5f * 5 * 2 - 0.25f * 7);
  EXPECT_EQ(y[192], 0.5f * 40 * 1 - 0.25f * 63);
  EXPECT_EQ(y[224], 0.5f * 33 * 15 - 0.25f * 48);
  EXPECT_EQ(y[223], -0.25f * 63);
  EXPECT_EQ(y[255], -0.25f * 48);
}

TEST(GgufDequant, Q5_K) {
  std::vector<BlockQ5_K> b(1);
  b[0].d = kH_0_5;
  b[0].dmin = kH_0_25;
  std::memcpy(b[0].scales, kKScales, 12);
  fill_q4k_qs(b[0].qs);
  // 5th bit: bit 2c of qh[l] -> weight l of sub-block 2c, bit 2c+1 -> sub-block 2c+1.
  std::memset(b[0].qh, 0, sizeof b[0].qh);
  b[0].qh[0] = 0x83;   // bits 0, 1, 7: weights 0 (sub 0), 32 (sub 1), 224 (sub 7)
  b[0].qh[7] = 0x08;   // bit 3: weight 103 (sub 3), not 71 (sub 2)
  b[0].qh[31] = 0x10;  // bit 4: weight 159 (sub 4), not 191 (sub 5)
  const auto y = deq(GgmlType::Q5_K, b, QK_K);
  EXPECT_EQ(y[0], 0.5f * 1 * (15 + 16) - 0.25f * 0);
  EXPECT_EQ(y[32], 0.5f * 2 * (5 + 16) - 0.25f * 4);
  EXPECT_EQ(y[71], 0.5f * 3 * 12 - 0.25f * 10);
  EXPECT_EQ(y[103], 0.5f * 63 * (9 + 16) - 0.25f * 1);
  EXPECT_EQ(y[159], 0.5f * 17 * (14 + 16) - 0.25f * 20);
  EXPECT_EQ(y[191], 0.5f * 5 * 2 - 0.25f * 7);
  EXPECT_EQ(y[192], 0.5f * 40 * 1 - 0.25f * 63);
  EXPECT_EQ(y[224], 0.5f * 33 * (15 + 16) - 0.25f * 48);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(GgufDequant, Q6_K) {
  std::vector<BlockQ6_K> b(1);
  std::memset(&b[0], 0, sizeof b[0]);
  b[0].d = kH_0_5;
  const int8_t sc[16] = {1, -2, 3, 4, 5, 6, 7, 8, -9, 10, 11, 12, 13, 14, 15, -16};
  std::memcpy(b[0].scales, sc, 16);
  // q = (4 low bits from ql) | (2 bits from qh) << 4, minus 32. Half 0 (weights 0..127):
  b[0].ql[0] = 0x7A;   // weight 0: low 10; weight 64: low 7
  b[0].ql[32] = 0x3F;  // weight 32: low 15; weight 96: low 3
  b[0].qh[0] = 0xE4;   // bits 0-1 = 0 (w0), 2-3 = 1 (w32), 4-5 = 2 (w64), 6-7 = 3 (w96)
  b[0].ql[17] = 0x0F;  // weight 17: low 15 (scale index 1)
  b[0].qh[17] = 0x03;  // weight 17: high 3
  // Half 1 (weights 128..255) uses ql[64..], qh[32..], scales[8..]:
  b[0].ql[80] = 0x21;   // weight 144: low 1; weight 208: low 2
  b[0].ql[112] = 0xC0;  // weight 176: low 0; weight 240: low 12
  b[0].qh[48] = 0x40;   // weight 240: high 1
  const auto y = deq(GgmlType::Q6_K, b, QK_K);
  EXPECT_EQ(y[0], 0.5f * 1 * (10 - 32));
  EXPECT_EQ(y[32], 0.5f * 3 * ((15 | 1 << 4) - 32));
  EXPECT_EQ(y[64], 0.5f * 5 * ((7 | 2 << 4) - 32));
  EXPECT_EQ(y[96], 0.5f * 7 * ((3 | 3 << 4) - 32));
  EXPECT_EQ(y[17], 0.5f * -2 * ((15 | 3 << 4) - 32));
  EXPECT_EQ(y[49], 0.5f * 4 * -32);
  EXPECT_EQ(y[81], 0.5f * 6 * -32);
  EXPECT_EQ(y[113], 0.5f * 8 * -32);
  EXPECT_EQ(y[128], 0.5f * -9 * -32);
  EXPECT_EQ(y[144], 0.5f * 10 * (1 - 32));
  EXPECT_EQ(y[176], 0.5f * 12 * (0 - 32));
  EXPECT_EQ(y[208], 0.5f * 14 * (2 - 32));
  EXPECT_EQ(y[240], 0.5f * -16 * ((12 | 1 << 4) - 32));
}

}  // namespace
}  // namespace mpkv

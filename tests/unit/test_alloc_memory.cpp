// The KV memory model that budgets count against (codes, fp16 scales and zeros, 16-bit sink + window).
#include <gtest/gtest.h>

#include "alloc/kv_memory.h"
#include "util/error.h"

namespace mpkv {
namespace {

KvMemorySpec smollm_layer(int64_t max_len) {
  KvMemorySpec s;
  s.head_dim = 64;  // SmolLM2: 3 KV heads of 64
  s.group = 0;      // G = head_dim
  s.heads = 3;
  s.tensors = 2;
  s.max_len = max_len;
  s.sink = 1;
  s.window = 128;
  return s;
}

TEST(KvMemory, RowBytesByHand) {
  KvMemorySpec s = smollm_layer(1000);
  // 64 codes at b bits = 8b bytes, plus one fp16 scale and one fp16 zero (4 bytes) per group of 64.
  EXPECT_EQ(kv_row_bytes(s, 2), 16 + 4);
  EXPECT_EQ(kv_row_bytes(s, 3), 24 + 4);
  EXPECT_EQ(kv_row_bytes(s, 4), 32 + 4);
  EXPECT_EQ(kv_row_bytes(s, 8), 64 + 4);
  EXPECT_EQ(kv_row_bytes(s, 16), 128 + 4);
  // ALGORITHMS.md 1: per-token G=64 adds 0.5 bit per element -> 2-bit codes cost 2.5 bits/element.
  EXPECT_DOUBLE_EQ(8.0 * kv_row_bytes(s, 2) / 64, 2.5);
  s.group = 32;  // two groups per row: 8 bytes of parameters
  EXPECT_EQ(kv_row_bytes(s, 4), 32 + 8);
}

TEST(KvMemory, ComponentBytesByHand) {
  const KvMemorySpec s = smollm_layer(1000);
  // 129 tokens (1 sink + 128 window) at 16 bits, 871 at b; 3 heads x (K, V) = 6 rows per token.
  EXPECT_EQ(kv_component_bytes(s, 4), 6 * (871 * 36 + 129 * 132));  // 290304
  EXPECT_EQ(kv_component_bytes(s, 2), 6 * (871 * 20 + 129 * 132));  // 206688
  EXPECT_EQ(kv_component_bytes(s, 4), 290304);
  KvMemorySpec head = s;
  head.heads = 1;
  head.tensors = 1;  // one RateQuant component: K of one head
  EXPECT_EQ(kv_component_bytes(head, 2), 871 * 20 + 129 * 132);
}

TEST(KvMemory, ShortContextIsAllSixteenBit) {
  const KvMemorySpec s = smollm_layer(50);  // fewer tokens than sink + window
  for (int b : {2, 4, 8, 16}) EXPECT_EQ(kv_component_bytes(s, b), 6 * 50 * 132) << b;
}

TEST(KvMemory, RejectsBadSpecAndBits) {
  KvMemorySpec s = smollm_layer(1000);
  EXPECT_THROW(kv_component_bytes(s, 5), Error);
  EXPECT_THROW(kv_component_bytes(s, 0), Error);
  s.head_dim = 60;
  EXPECT_THROW(kv_component_bytes(s, 4), Error);
  s = smollm_layer(1000);
  s.group = 24;  // does not divide 64
  EXPECT_THROW(kv_component_bytes(s, 4), Error);
  s = smollm_layer(0);
  EXPECT_THROW(kv_component_bytes(s, 4), Error);
  s = smollm_layer(1000);
  s.tensors = 3;
  EXPECT_THROW(kv_component_bytes(s, 4), Error);
  s = smollm_layer(1000);
  s.window = -1;
  EXPECT_THROW(kv_component_bytes(s, 4), Error);
}

}  // namespace
}  // namespace mpkv

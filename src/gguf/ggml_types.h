// ggml tensor types as stored in GGUF files, with their block layouts.
// Block structs mirror the GGUF on-disk format byte for byte (little-endian, packed as listed);
// d/m/dmin are IEEE fp16 bit patterns. Layouts follow the ggml format definition:
//   Q4_0: 32 weights, x = d * (q - 8), q 4-bit; qs[j] holds weight j (low nibble) and j+16 (high).
//   Q4_1: 32 weights, x = d * q + m.
//   Q5_0: 32 weights, x = d * (q - 16), q = nibble | (bit j of qh) << 4.
//   Q5_1: 32 weights, x = d * q + m.
//   Q8_0: 32 weights, x = d * q, q int8.
//   Q4_K, Q5_K, Q6_K: super-blocks of 256 (see dequant.cpp for the sub-block scale packing).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mpkv {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
};

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK_K = 256, K_SCALE_SIZE = 12;

#pragma pack(push, 1)
struct BlockQ4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[QK4_1 / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[QK8_0]; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210, "ggml block sizes");

struct GgmlTypeInfo {
  const char* name;
  int block_size;     // weights per block (1 for plain types)
  size_t type_size;   // bytes per block
  bool supported;     // mpkv can dequantize it
};

// Info for a type id; returns nullptr for ids mpkv does not know at all.
const GgmlTypeInfo* ggml_type_info(uint32_t type);
std::string ggml_type_name(uint32_t type);
// Bytes for n elements (n must be a multiple of the block size; throws Error otherwise).
size_t ggml_row_bytes(GgmlType type, int64_t n);

}  // namespace mpkv

// Table of ggml tensor types: name, weights per block, bytes per block, whether mpkv dequantizes it.
// Sizes follow ggml's type_traits (ggml.c); ids 4 and 5 (Q4_2, Q4_3) were removed from ggml long ago.
#include "gguf/ggml_types.h"

#include "util/error.h"

namespace mpkv {

namespace {

constexpr uint32_t kNumTypes = 31;  // ids 0..30 (BF16 = 30)

// Indexed by type id; name == nullptr marks an id that is not a type.
constexpr GgmlTypeInfo kTypes[kNumTypes] = {
    {"F32", 1, 4, true},        // 0
    {"F16", 1, 2, true},        // 1
    {"Q4_0", 32, 18, true},     // 2
    {"Q4_1", 32, 20, true},     // 3
    {nullptr, 0, 0, false},     // 4: Q4_2 (removed)
    {nullptr, 0, 0, false},     // 5: Q4_3 (removed)
    {"Q5_0", 32, 22, true},     // 6
    {"Q5_1", 32, 24, true},     // 7
    {"Q8_0", 32, 34, true},     // 8
    {"Q8_1", 32, 36, false},    // 9: fp16 d, fp16 s, 32 x int8 (gguf-py still says 40: float d, s)
    {"Q2_K", 256, 84, false},   // 10
    {"Q3_K", 256, 110, false},  // 11
    {"Q4_K", 256, 144, true},   // 12
    {"Q5_K", 256, 176, true},   // 13
    {"Q6_K", 256, 210, true},   // 14
    {"Q8_K", 256, 292, false},  // 15
    {"IQ2_XXS", 256, 66, false},  // 16
    {"IQ2_XS", 256, 74, false},   // 17
    {"IQ3_XXS", 256, 98, false},  // 18
    {"IQ1_S", 256, 50, false},    // 19
    {"IQ4_NL", 32, 18, false},    // 20
    {"IQ3_S", 256, 110, false},   // 21
    {"IQ2_S", 256, 82, false},    // 22
    {"IQ4_XS", 256, 136, false},  // 23
    {"I8", 1, 1, false},          // 24
    {"I16", 1, 2, false},         // 25
    {"I32", 1, 4, false},         // 26
    {"I64", 1, 8, false},         // 27
    {"F64", 1, 8, false},         // 28
    {"IQ1_M", 256, 56, false},    // 29
    {"BF16", 1, 2, true},         // 30
};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  if (type >= kNumTypes || kTypes[type].name == nullptr) return nullptr;
  return &kTypes[type];
}

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  return info ? std::string(info->name) : "unknown ggml type " + std::to_string(type);
}

size_t ggml_row_bytes(GgmlType type, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  MPKV_CHECK(info != nullptr, "ggml_row_bytes: " + ggml_type_name(static_cast<uint32_t>(type)));
  MPKV_CHECK(n >= 0 && n % info->block_size == 0,
             "ggml_row_bytes: " + std::to_string(n) + " elements of " + info->name +
                 " is not a multiple of its block size " + std::to_string(info->block_size));
  size_t bytes = 0;
  MPKV_CHECK(!__builtin_mul_overflow(static_cast<size_t>(n / info->block_size), info->type_size, &bytes),
             "ggml_row_bytes: byte size of " + std::to_string(n) + " " + info->name + " elements overflows");
  return bytes;
}

}  // namespace mpkv

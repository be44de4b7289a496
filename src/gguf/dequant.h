// Dequantization of ggml tensor types to float32 (the scalar reference for every weight format).
#pragma once
#include <cstdint>

#include "gguf/ggml_types.h"

namespace mpkv {

// Dequantizes n consecutive elements of a row stored as `type` at `src` into dst[n].
// n must be a multiple of the type's block size; throws Error for unsupported types.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace mpkv

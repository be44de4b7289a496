#include "alloc/kv_memory.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace mpkv {

namespace {
int effective_group(const KvMemorySpec& s) { return s.group == 0 ? s.head_dim : s.group; }
}  // namespace

void validate(const KvMemorySpec& s) {
  MPKV_CHECK(s.head_dim > 0 && s.head_dim % 8 == 0,
             "kv memory: head_dim must be a positive multiple of 8, got " + std::to_string(s.head_dim));
  const int g = effective_group(s);
  MPKV_CHECK(g > 0 && s.head_dim % g == 0,
             "kv memory: group " + std::to_string(s.group) + " must divide head_dim " + std::to_string(s.head_dim));
  MPKV_CHECK(s.heads >= 1, "kv memory: heads must be >= 1, got " + std::to_string(s.heads));
  MPKV_CHECK(s.tensors == 1 || s.tensors == 2, "kv memory: tensors must be 1 (K or V) or 2 (K and V), got " +
                                                    std::to_string(s.tensors));
  MPKV_CHECK(s.max_len >= 1, "kv memory: max_len must be >= 1, got " + std::to_string(s.max_len));
  MPKV_CHECK(s.sink >= 0 && s.window >= 0, "kv memory: sink and window must be >= 0");
}

int64_t kv_row_bytes(const KvMemorySpec& s, int bits) {
  validate(s);
  MPKV_CHECK(bits == 1 || bits == 2 || bits == 3 || bits == 4 || bits == 8 || bits == 16,
             "kv memory: bits must be 1, 2, 3, 4, 8 or 16, got " + std::to_string(bits));
  const int64_t groups = s.head_dim / effective_group(s);
  return (int64_t)s.head_dim * bits / 8 + groups * (2 + 2);  // fp16 scale + fp16 zero per group
}

int64_t kv_component_bytes(const KvMemorySpec& s, int bits) {
  const int64_t row_b = kv_row_bytes(s, bits);
  const int64_t row_16 = kv_row_bytes(s, 16);
  const int64_t n16 = std::min<int64_t>(s.max_len, (int64_t)s.sink + s.window);
  const int64_t nb = s.max_len - n16;
  return (int64_t)s.heads * s.tensors * (nb * row_b + n16 * row_16);
}

}  // namespace mpkv

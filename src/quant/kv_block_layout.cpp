#include "quant/kv_block_layout.h"

#include <string>

#include "quant/quant_options.h"
#include "util/error.h"

namespace mpkv {

KvBlockLayout make_kv_block_layout(Codec codec, GroupAxis axis, int bits, int head_dim, int tokens, int group) {
  const std::string who = "KV block layout: ";
  MPKV_CHECK(head_dim > 0 && head_dim <= kMaxHeadDim && head_dim % 8 == 0,
             who + "head_dim " + std::to_string(head_dim) + " must be a positive multiple of 8 up to " +
                 std::to_string(kMaxHeadDim));
  MPKV_CHECK(tokens >= 1 && tokens <= (1 << 24), who + "tokens " + std::to_string(tokens) + " outside [1, 2^24]");
  KvBlockLayout L;
  L.codec = codec;
  L.axis = axis;
  L.bits = bits;
  L.head_dim = head_dim;
  L.tokens = tokens;
  L.group = group;
  if (codec == Codec::lloyd_max) {
    MPKV_CHECK(is_supported_codebook_bits(bits), who + "unsupported Lloyd-Max bits " + std::to_string(bits));
    MPKV_CHECK(axis == GroupAxis::token && group == head_dim,
               who + "Lloyd-Max codes are per token with one norm per vector (group == head_dim)");
    L.n_params = (size_t)tokens;
    L.n_zeros = 0;
  } else {
    MPKV_CHECK(is_supported_uniform_bits(bits),
               who + "unsupported bits " + std::to_string(bits) + " (expected 1, 2, 3, 4, 8 or 16)");
    if (axis == GroupAxis::token) {
      MPKV_CHECK(group > 0 && head_dim % group == 0 && group % 8 == 0,
                 who + "channel group " + std::to_string(group) + " must divide head_dim " +
                     std::to_string(head_dim) + " and be a multiple of 8");
      L.n_params = (size_t)tokens * (head_dim / group);
    } else {
      MPKV_CHECK(group > 0 && tokens % group == 0,
                 who + "token group " + std::to_string(group) + " must divide the block's " +
                     std::to_string(tokens) + " tokens");
      L.n_params = (size_t)(tokens / group) * head_dim;
    }
    L.n_zeros = L.n_params;
  }
  L.row_bytes = (size_t)head_dim * bits / 8;
  L.codes_offset = 0;
  L.codes_bytes = L.row_bytes * tokens;
  L.scales_offset = L.codes_offset + L.codes_bytes;
  L.zeros_offset = L.scales_offset + 2 * L.n_params;
  L.bytes = L.zeros_offset + 2 * L.n_zeros;
  return L;
}

void check_token_range(const KvBlockLayout& L, int t0, int n) {
  MPKV_CHECK(t0 >= 0 && n >= 0 && (long long)t0 + n <= L.tokens,
             "token range [" + std::to_string(t0) + ", " + std::to_string((long long)t0 + n) +
                 ") is outside the block's " + std::to_string(L.tokens) + " tokens");
  if (L.axis == GroupAxis::channel) {
    MPKV_CHECK(t0 % L.group == 0 && n % L.group == 0,
               "per-channel groups of " + std::to_string(L.group) + " tokens: range [" + std::to_string(t0) + ", " +
                   std::to_string(t0 + n) + ") must cover whole groups");
  }
}

}  // namespace mpkv

#include "quant/quant_options.h"

#include "util/error.h"

namespace mpkv {

bool is_supported_uniform_bits(int bits) {
  return bits == 1 || bits == 2 || bits == 3 || bits == 4 || bits == 8 || bits == 16;
}
bool is_supported_codebook_bits(int bits) { return bits >= 1 && bits <= 4; }

bool groups_along_tokens(const QuantOptions& o) {
  return o.method == QuantMethod::kivi && o.role == KvRole::key;
}

int effective_group(const QuantOptions& o) {
  if (o.group != 0) return o.group;
  return groups_along_tokens(o) ? kKiviDefaultGroup : o.head_dim;
}

bool supports_shrink(const QuantOptions& o) { return o.method != QuantMethod::turbo; }

static bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

void validate(const QuantOptions& o) {
  const std::string who = std::string("quantizer ") + method_name(o.method) + " (" + role_name(o.role) + "): ";
  MPKV_CHECK(o.head_dim > 0 && o.head_dim <= kMaxHeadDim,
             who + "head_dim " + std::to_string(o.head_dim) + " is outside [1, " + std::to_string(kMaxHeadDim) + "]");
  MPKV_CHECK(o.head_dim % 8 == 0,
             who + "head_dim " + std::to_string(o.head_dim) + " is not a multiple of 8 (codes are packed 8 at a time)");
  if (o.method == QuantMethod::turbo) {
    MPKV_CHECK(is_supported_codebook_bits(o.bits),
               who + "unsupported bits " + std::to_string(o.bits) + " (turbo Lloyd-Max codebooks exist for 1, 2, 3, 4)");
  } else {
    MPKV_CHECK(is_supported_uniform_bits(o.bits),
               who + "unsupported bits " + std::to_string(o.bits) + " (expected 1, 2, 3, 4, 8 or 16)");
  }
  if (o.method == QuantMethod::rotated || o.method == QuantMethod::turbo) {
    MPKV_CHECK(is_power_of_two(o.head_dim),
               who + "the Hadamard rotation needs a power-of-two head_dim, got " + std::to_string(o.head_dim));
  }
  MPKV_CHECK(o.group >= 0, who + "group " + std::to_string(o.group) + " is negative");
  const int g = effective_group(o);
  if (o.method == QuantMethod::turbo) {
    // One norm per vector: a group size other than head_dim would mean nothing.
    MPKV_CHECK(g == o.head_dim, who + "turbo codes whole vectors; group must be 0 or head_dim (" +
                                    std::to_string(o.head_dim) + "), got " + std::to_string(g));
  } else if (groups_along_tokens(o)) {
    MPKV_CHECK(g >= 1 && g <= 65536, who + "token group " + std::to_string(g) + " is outside [1, 65536]");
  } else {
    MPKV_CHECK(o.head_dim % g == 0, who + "group " + std::to_string(g) + " does not divide head_dim " +
                                        std::to_string(o.head_dim));
    MPKV_CHECK(g % 8 == 0, who + "group " + std::to_string(g) +
                               " is not a multiple of 8 (each group starts on a byte boundary at every bit-width)");
  }
}

const char* method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::uniform: return "uniform";
    case QuantMethod::kivi: return "kivi";
    case QuantMethod::rotated: return "rotated";
    case QuantMethod::turbo: return "turbo";
  }
  return "?";
}

QuantMethod parse_method(const std::string& s) {
  if (s == "uniform") return QuantMethod::uniform;
  if (s == "kivi") return QuantMethod::kivi;
  if (s == "rotated") return QuantMethod::rotated;
  if (s == "turbo") return QuantMethod::turbo;
  throw Error("unknown quantizer '" + s + "' (expected uniform, kivi, rotated or turbo)");
}

const char* role_name(KvRole r) { return r == KvRole::key ? "key" : "value"; }

KvRole parse_role(const std::string& s) {
  if (s == "key" || s == "k" || s == "K") return KvRole::key;
  if (s == "value" || s == "v" || s == "V") return KvRole::value;
  throw Error("unknown KV role '" + s + "' (expected key or value)");
}

}  // namespace mpkv

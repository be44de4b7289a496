// What one KV component (one layer, one KV head, K or V) is quantized with, and the one place
// that decides whether those options are acceptable.
//
// Methods (docs/algorithms.md §1, §7):
//   uniform  per-token asymmetric min-max: one (scale, zero) per token per group of G channels
//            along head_dim (G defaults to head_dim, as PM-KVQ / llama.cpp).
//   kivi     keys per-channel: one (scale, zero) per channel per group of G tokens (default 32);
//            values per-token exactly as `uniform` (G channels, default head_dim).
//   rotated  orthonormal fast Walsh-Hadamard over head_dim, then `uniform` (QuaRot-style).
//   turbo    TurboQuant-style: ||x|| stored, random-sign Hadamard of x / ||x||, each coordinate
//            coded with the Lloyd-Max codebook of N(0, 1/d) (1-4 bits).
#pragma once
#include <cstdint>
#include <string>

namespace mpkv {

enum class QuantMethod { uniform, kivi, rotated, turbo };
enum class KvRole { key, value };

// KIVI's default key group (tokens per per-channel group) and residual window (KIVI: G=32, R=128).
inline constexpr int kKiviDefaultGroup = 32;
// Seed of turbo's random signs when the options do not give one (any fixed value: the signs only
// have to be the same at quantize and dequantize time).
inline constexpr uint64_t kTurboDefaultSeed = 0x9E3779B97F4A7C15ull;
// Largest head_dim accepted (kernels keep a few head_dim-sized scratch rows).
inline constexpr int kMaxHeadDim = 4096;

struct QuantOptions {
  QuantMethod method = QuantMethod::uniform;
  KvRole role = KvRole::key;
  int bits = 4;                        // uniform/kivi/rotated: 1,2,3,4,8,16; turbo: 1..4
  int head_dim = 64;
  int group = 0;                       // 0 = the method's default (see effective_group)
  uint64_t seed = kTurboDefaultSeed;   // turbo only: random signs of the Hadamard transform
};

// Throws Error with a message naming the bad field unless the options can be used:
// supported bits for the method, head_dim > 0 and a multiple of 8 (every bit-width packs whole
// bytes per 8 codes), group dividing head_dim and a multiple of 8 (per-token groups), a power-of-two
// head_dim for rotated / turbo. Call it before any work starts.
void validate(const QuantOptions& o);

// The group size actually used: o.group, or the method's default when it is 0.
int effective_group(const QuantOptions& o);
// True when (scale, zero) run along tokens for each channel (KIVI keys); false for per-token groups.
bool groups_along_tokens(const QuantOptions& o);
// True when the bit-width can be halved in place by the equivalent right shift (min-max codes).
bool supports_shrink(const QuantOptions& o);

const char* method_name(QuantMethod m);
QuantMethod parse_method(const std::string& s);   // "uniform" | "kivi" | "rotated" | "turbo"; Error otherwise
const char* role_name(KvRole r);
KvRole parse_role(const std::string& s);           // "key" | "value" (or "k" | "v")

// Bit-widths a uniform (min-max) code can have, and those the Lloyd-Max codebooks exist for.
bool is_supported_uniform_bits(int bits);
bool is_supported_codebook_bits(int bits);

}  // namespace mpkv

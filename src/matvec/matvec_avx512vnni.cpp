// AVX-512 VNNI packed kernels (compiled with the AVX-512 flags plus -mavx512vnni; called only when
// cpu_has_avx512_vnni()). The lane arithmetic is matvec_packed.h's, so they give the same bits
// as the maddubs kernels of the AVX2 / AVX-512 tables and as the _ref kernels.
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed_x86.h"

namespace mpkv {

namespace {

// vpdpbusd (u8 codes x s8 activations, 4 products a lane) straight into int32.
struct DotVnni {
  using Sum = __m256i;  // 8 int32 lanes, one per packed row
  static Sum zero() { return _mm256_setzero_si256(); }
  static Sum add(Sum s, __m256i codes, __m256i act) { return _mm256_dpbusd_epi32(s, codes, act); }
  static __m256i lanes(Sum s) { return s; }
};

// Q8_0: vpdpbusd takes the unsigned operand first, so the activation codes go in as a + 128 (xor
// 0x80) against the signed weight codes, and 128 * (the row's code sum, stored in the block) comes
// off at the end: sum (a + 128) w - 128 sum w = sum a w, exactly in int32.
struct SumsQ8_0Vnni {
  static constexpr size_t kBlockBytes = kPackedQ8_0BlockBytes, kScaleAt = 256, kMinAt = 0;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m256i* isum) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int v = 0; v < V; ++v) isum[v] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 * c));
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v)
        isum[v] = _mm256_dpbusd_epi32(isum[v], _mm256_xor_si256(packed_act4(a[(size_t)v * stride], c), flip), w);
    }
    const __m256i wsum = _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 272)));
    const __m256i off = _mm256_slli_epi32(wsum, 7);
    for (int v = 0; v < V; ++v) isum[v] = _mm256_sub_epi32(isum[v], off);
  }
};

}  // namespace

// 8 activation rows per tile: 8 accumulators + 8 integer sums fit the 32 vector registers.
extern const PackedTileFn kPackedQ4_1Vnni, kPackedQ8_0Vnni;
constinit const PackedTileFn kPackedQ4_1Vnni = packed_tile<SumsQ4_1<DotVnni>, 8>;
constinit const PackedTileFn kPackedQ8_0Vnni = packed_tile<SumsQ8_0Vnni, 8>;

}  // namespace mpkv

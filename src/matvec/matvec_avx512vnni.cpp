// AVX-512 VNNI packed kernels (compiled with the AVX-512 flags plus -mavx512vnni; called only when
// cpu_has_avx512_vnni()): a group's 16 interleaved rows in the 16 lanes of 512-bit registers,
// vpdpbusd (u8 x s8, 4 products a lane) straight into int32. The lane arithmetic is
// matvec_packed.h's, so they give the same bits as the 256-bit kernels and the _ref kernels.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_*() (GCC
// bug 105593, as in matvec_avx512.cpp); the code here reads no uninitialized value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "matvec/matvec_kernels.h"
#include "matvec/matvec_packed_kquant_x86.h"
#include "matvec/matvec_packed_q5_0_x86.h"
#include "matvec/matvec_packed_x86.h"

namespace mpkv {

namespace {

// The 4 activation codes [4k, 4k + 4) of `a` in every 32-bit lane.
inline __m512i packed_act4_512(const BlockQ8Act& a, int k) { return _mm512_set1_epi32(packed_act_word(a, k)); }

// Block sums of a whole group (as the 256-bit Sums of matvec_packed_x86.h, 16 lanes).
struct Sums512Q4_1 {
  static constexpr size_t kBlockBytes = kPackedQ4_1BlockBytes, kScaleAt = kPackedQ4_1ScaleAt, kMinAt = kPackedQ4_1MinAt;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m512i* isum) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int v = 0; v < V; ++v) isum[v] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = _mm512_loadu_si512(blk + kPackedChunkBytes * c);
      const __m512i lo = _mm512_and_si512(raw, low), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        isum[v] = _mm512_dpbusd_epi32(isum[v], lo, packed_act4_512(a[(size_t)v * stride], c));
        isum[v] = _mm512_dpbusd_epi32(isum[v], hi, packed_act4_512(a[(size_t)v * stride], c + 4));
      }
    }
  }
};

// Q8_0: vpdpbusd takes the unsigned operand first, so the activation codes go in as a + 128 (xor
// 0x80) against the signed weight codes, and 128 * (the row's code sum, stored in the block) comes
// off at the end: sum (a + 128) w - 128 sum w = sum a w, exactly in int32.
struct Sums512Q8_0 {
  static constexpr size_t kBlockBytes = kPackedQ8_0BlockBytes, kScaleAt = kPackedQ8_0ScaleAt, kMinAt = 0;
  template <int V>
  static void sums(const uint8_t* blk, const BlockQ8Act* a, size_t stride, __m512i* isum) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int v = 0; v < V; ++v) isum[v] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512i w = _mm512_loadu_si512(blk + kPackedChunkBytes * c);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v)
        isum[v] = _mm512_dpbusd_epi32(isum[v], _mm512_xor_si512(packed_act4_512(a[(size_t)v * stride], c), flip), w);
    }
    const __m512i wsum =
        _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedQ8_0SumAt)));
    const __m512i off = _mm512_slli_epi32(wsum, 7);
    for (int v = 0; v < V; ++v) isum[v] = _mm512_sub_epi32(isum[v], off);
  }
};

// Q4_K: a Q4_1 block with fp32 scales and mins (matvec_packed_kquant_x86.h).
struct Sums512Q4_K : Sums512Q4_1 {
  static constexpr size_t kBlockBytes = kPackedQ4_KBlockBytes, kScaleAt = kPackedQ4_KScaleAt, kMinAt = kPackedQ4_KMinAt;
  static constexpr bool kScalesF32 = true;
};

// The 16 per-row scales (or mins) at `at`: fp16, or fp32 where S::kScalesF32.
template <class S>
inline __m512 packed_scales16(const uint8_t* at) {
  if constexpr (requires { S::kScalesF32; }) return _mm512_loadu_ps(at);
  else return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
}

// A group's 16 rows x V activation rows: out[v * 16 + r].
template <class S, int V>
void packed_rows_512(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, float* out) {
  __m512 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + (size_t)b * S::kBlockBytes;
    packed_prefetch_next_group<S>(blk, nb);
    __m512i isum[V];
    S::template sums<V>(blk, xq + b, xq_stride, isum);
    const __m512 d = packed_scales16<S>(blk + S::kScaleAt);
    __m512 m = _mm512_setzero_ps();
    if constexpr (S::kMinAt > 0) m = packed_scales16<S>(blk + S::kMinAt);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const BlockQ8Act& a = xq[(size_t)v * xq_stride + b];
      const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(a.d));
      acc[v] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum[v]), acc[v]);
      if constexpr (S::kMinAt > 0) acc[v] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.s), acc[v]);
    }
  }
  for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + (size_t)v * kPackRows, acc[v]);
}

template <class S>
struct PackedRows512 {
  template <int V>
  struct Rows {
    static void run(const uint8_t* g, int64_t nb, const BlockQ8Act* xq, size_t st, float* out) {
      packed_rows_512<S, V>(g, nb, xq, st, out);
    }
  };
};

// 8 activation rows per tile: 8 accumulators + 8 integer sums fit the 32 vector registers.
template <class S>
void packed_tile_512(const uint8_t* group, int64_t nb, const BlockQ8Act* xq, size_t xq_stride, int nv, float* out) {
  packed_tiles<PackedRows512<S>::template Rows, 8>(group, nb, xq, xq_stride, nv, out);
}

}  // namespace

extern const PackedTileFn kPackedQ4_1Vnni, kPackedQ8_0Vnni, kPackedQ4_KVnni, kPackedQ6_KVnni, kPackedQ5_0Vnni;
constinit const PackedTileFn kPackedQ4_1Vnni = packed_tile_512<Sums512Q4_1>;
constinit const PackedTileFn kPackedQ8_0Vnni = packed_tile_512<Sums512Q8_0>;
constinit const PackedTileFn kPackedQ4_KVnni = packed_tile_512<Sums512Q4_K>;
constinit const PackedTileFn kPackedQ6_KVnni = packed_tile_512<Sums512Q6_K>;
constinit const PackedTileFn kPackedQ5_0Vnni = packed_tile_512<Sums512Q5_0>;

}  // namespace mpkv

// Kernels of attention over a paged KV cache whose pages are packed at any bit-width, and their
// per-ISA table (docs/design.md §1-3). Dequantization happens inside the dot product and the
// value accumulation; nothing is ever written out as floats.
//
// Every kernel handles nq queries at once (the query heads of one KV head, times the query tokens
// of a prefill block), so each packed code is decoded once for all of them.
//
//   packed_scores      s[j * lds + i] = q_j . x_hat[t0 + i]               j < nq, i < n
//   packed_accumulate  acc_j[:] += sum_i w[j * ldw + i] * x_hat[t0 + i]    (acc_j at acc + j * ldacc)
//   f16_scores         the same over fp16 rows x_i = x + i * stride (uint16 fp16 bits, head_dim d)
//   f16_accumulate
//   exp_sum            s[i] = exp(s[i] - m) (0 when s[i] = -inf), returns sum_i s[i]; m finite
//   max_value          max_i s[i] (-inf for n = 0)
//
// x_hat of a packed block (kv_block_layout.h), in the block's CODE space (the caller rotates q
// and un-rotates the output for rotated / turbo components):
//   uniform, token axis    code * (S[t, group of c] m) + Z[t, group of c]   (m = L.scale_mult)
//                          q . x_hat = sum_g S_g m (q . code)_g + Z_g * (sum_{c in g} q_c)
//   uniform, channel axis  code * (S[t / G, c] m) + Z[t / G, c]   (KIVI keys)
//                          scores fold S m into the query once per token group: q'_c = q_c S_c m,
//                          then q . x_hat = q' . code + sum_c q_c Z_c
//   lloyd_max              centroid[code] * norm[t] / sqrt(head_dim)   (turbo)
//
//   packed_scores_q8   packed_scores with the queries quantized to int8 (Q8Queries below), the
//                      integer dot over the codes exact (maddubs / madd), the block's scales
//                      folded in around it. Like llama.cpp's q8 activations: a few integer
//                      multiplies per code instead of a float decode; the cost is the query's
//                      rounding (tested against float queries with its own tolerance).
//                      Layouts: q8_scores_apply() -- uniform codes of 2, 4, 8 or 16 bits, and
//                        token axis, one group per row: s = S m qs (q8 . code) + Z sum(q)
//                        channel axis (KIVI keys), per token group g of G rows: the channel
//                          scales are folded into the float query, q'_c = q_c (S_gc m), which is
//                          requantized once per group (q8' with scale qs'_g by the same rule), and
//                          s = qs'_g (q8' . code) + sum_c q_c Z_gc
//                      (m = KvBlockLayout::scale_mult). So KIVI keys cost one requantization per G
//                      rows more than per-token keys.
//
//   packed_accumulate_q8  packed_accumulate with each query's weights folded with the rows' true
//                      scales and quantized to int8, per call: w'_i = w_i S_i m, step = max_i |w'_i| / 127,
//                      w8_i = nearest integer to w'_i (1 / step) (the Q8Queries rule), and
//                      acc_j += step (sum_i w8_i code_i) + sum_i w_i Z_i, the integer sums exact
//                      (maddubs over token pairs: rows i, i + 1 interleaved per channel in registers).
//                      Layouts: q8_values_apply() -- uniform 2- or 4-bit codes, one group per row.
//                      The cost is the weights' rounding, at most step / 2 per row, which next to
//                      the codes' own rounding (S / 2 per element at 2^bits - 1 steps) is small
//                      (tested against float weights with its own tolerance).
//                      The in-page layout stays token-major (kv_block_layout.h): the two rows'
//                      bytes are interleaved in registers and the code fields masked in place
//                      (a few unpack / shift / mask ops per row pair and 64 channels, see
//                      paged_attention_kernels_avx2.cpp; 25 shuffles before), which leaves the
//                      int32 sums in a permuted channel order that is undone once per call; a
//                      token-interleaved page layout would save those few ops but the quantizer,
//                      shrink and their exhaustive tests would all have had to follow it.
//
// Precision of the int8 paths: they apply to every 2/4/8/16-bit key page, so young pages at 16 or 8
// bits are scored with the query's int8 rounding too (|error| <= scale / 2 per query component, the
// same for every width); PagedKvCache::set_q8_queries(false) gives the float kernels back.
//
// scale_mult: every kernel multiplies each uniform block's stored scales by L.scale_mult (once per
// block or per folded group, never per code).
//
// SIMD coverage (everything else forwards to _ref): AVX2 and AVX-512 handle uniform token-axis
// blocks at every bit-width, channel-axis key scores (KIVI), fp16 rows and exp_sum; the q8
// kernels (scores and accumulate) are 256-bit integer madds written once
// (paged_attention_q8_simd.h) and compiled in both the AVX2 and the AVX-512 file: the AVX-512
// entries differ only in what the compiler may use (32 vector registers: the value kernel keeps
// the accumulators of a 4-query tile in registers, one pass over the rows; AVX2's 16 hold those of
// up to 3 queries, and a 4-query tile takes two passes). On CPUs with AVX-512
// VNNI the avx512 tier's q8 entries for 2- and 4-bit codes are the vpdpbusd kernels of
// paged_attention_kernels_avx512vnni.cpp (4 rows per instruction; same integer sums).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/kv_block_layout.h"
#include "util/cpu_features.h"

namespace mpkv {

// One packed block as a kernel reads it. centroids: the Lloyd-Max codebook (2^bits fp32 values)
// for Codec::lloyd_max, else unused.
struct PackedBlockView {
  const KvBlockLayout* layout = nullptr;
  const uint8_t* data = nullptr;
  const float* centroids = nullptr;
};

// Queries quantized to int8, one scale per query: scale = max_c |q_c| / 127 (0 for q = 0),
// q8_c = nearest integer to q_c * (1 / scale) (ties to even), in channel order (the SIMD kernels
// reorder them in registers to match the byte planes of unpacked 2- and 4-bit codes, once per call).
// `f` keeps the float queries they came from: channel-axis (KIVI) keys fold their scales into them.
struct Q8Queries {
  int nq = 0, d = 0;
  const int8_t* natural = nullptr;  // [nq, d]
  const float* scale = nullptr;     // [nq]
  const float* sum = nullptr;       // [nq] sum_c q_c of the float query
  const float* f = nullptr;         // [nq, d] at row stride ldf
  size_t ldf = 0;
};

// Most channels the q8 kernels handle (their per-query registers and scratch are sized by it).
inline constexpr int kMaxQ8Dim = 256;

// Whether packed_scores_q8 handles a key block: uniform codes of 2, 4, 8 or 16 bits, head_dim a
// multiple of 64 and at most kMaxQ8Dim (16-bit dots then stay inside int32: 256 x 65535 x 127 <
// 2^31), token axis with one group per row, or channel axis.
inline bool q8_scores_apply(const KvBlockLayout& L) {
  const bool bits_ok = L.bits == 2 || L.bits == 4 || L.bits == 8 || L.bits == 16;
  const bool groups_ok = L.axis == GroupAxis::channel || L.group == L.head_dim;
  return L.codec == Codec::uniform && bits_ok && groups_ok && L.head_dim % 64 == 0 && L.head_dim <= kMaxQ8Dim;
}

// Whether packed_accumulate_q8 handles a value block: uniform 2- or 4-bit codes, token axis with one
// group per row, head_dim a multiple of 64 and at most kMaxQ8Dim.
inline bool q8_values_apply(const KvBlockLayout& L) {
  return L.codec == Codec::uniform && L.axis == GroupAxis::token && L.group == L.head_dim &&
         (L.bits == 2 || L.bits == 4) && L.head_dim % 64 == 0 && L.head_dim <= kMaxQ8Dim;
}

// The int8 rule above for one vector x[d]: writes q8[d], returns the scale. Shared by the query
// quantizer and the channel-axis fold so every variant rounds identically.
float quantize_q8_row(const float* x, int d, int8_t* q8);

// Channel-axis (KIVI) fold of one query for token group tg of a block: q'_c = q_c (S_c m) into qf[d]
// (m = L.scale_mult; S in fp32 times m, then times q_c, the order every variant uses), and
// returns sum_c q_c Z_c.
float fold_channel_query(const KvBlockLayout& L, const uint8_t* block, int tg, const float* q, float* qf);

// One query's weights for rows [t0, t0 + n) of a uniform token-axis block (one group per row),
// folded and quantized as packed_accumulate_q8 defines: w8[n], returns the step; *bz = sum_i w_i Z_i.
float quantize_weights_q8(const KvBlockLayout& L, const uint8_t* block, const float* w, int t0, int n, int8_t* w8,
                          float* bz);

// Most rows one kernel call may cover (callers split longer stretches; kernels keep per-row
// scratch on the stack).
inline constexpr int kMaxKernelRows = 256;

using PackedScoresFn = void (*)(const PackedBlockView& b, const float* q, size_t ldq, int nq, int t0, int n, float* s,
                                size_t lds);
using PackedAccumulateFn = void (*)(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n,
                                    float* acc, size_t ldacc);
using F16ScoresFn = void (*)(const uint16_t* x, size_t stride, int d, const float* q, size_t ldq, int nq, int n,
                             float* s, size_t lds);
using F16AccumulateFn = void (*)(const uint16_t* x, size_t stride, int d, const float* w, size_t ldw, int nq, int n,
                                 float* acc, size_t ldacc);
using ExpSumFn = float (*)(float* s, int n, float m);
// Precondition: q8_values_apply(*b.layout), n <= kMaxKernelRows.
using PackedAccumulateQ8Fn = PackedAccumulateFn;
// Precondition: q8_scores_apply(*b.layout).
using PackedScoresQ8Fn = void (*)(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds);

struct PagedAttentionKernels {
  Isa isa;
  PackedScoresFn packed_scores;
  PackedAccumulateFn packed_accumulate;
  F16ScoresFn f16_scores;
  F16AccumulateFn f16_accumulate;
  ExpSumFn exp_sum;
  PackedScoresQ8Fn packed_scores_q8;
  float (*max_value)(const float* s, int n);
  PackedAccumulateQ8Fn packed_accumulate_q8;
  const char* name;  // "ref", "avx2", "avx512", "avx512vnni"
};

// The table for active_isa() (chosen once), and the table of one variant (Error when this CPU
// cannot run it). VNNI is not a tier: on a CPU with it the avx512 tier's table is the AVX-512 one
// with the VNNI int8 kernels (same integer sums, same fp32 epilogues, so the same bits).
const PagedAttentionKernels& paged_attention_kernels();
const PagedAttentionKernels& paged_attention_kernels_for(Isa isa);
// Every table this CPU can run, lowest first (the tests compare each with _ref): ref, avx2, the
// plain AVX-512 one, and the VNNI one where the CPU has it.
std::vector<const PagedAttentionKernels*> paged_attention_kernel_tables();

void packed_scores_ref(const PackedBlockView& b, const float* q, size_t ldq, int nq, int t0, int n, float* s, size_t lds);
void packed_accumulate_ref(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                           size_t ldacc);
void f16_scores_ref(const uint16_t* x, size_t stride, int d, const float* q, size_t ldq, int nq, int n, float* s,
                    size_t lds);
void f16_accumulate_ref(const uint16_t* x, size_t stride, int d, const float* w, size_t ldw, int nq, int n, float* acc,
                        size_t ldacc);
float exp_sum_ref(float* s, int n, float m);
void packed_scores_q8_ref(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds);
float max_value_ref(const float* s, int n);
void packed_accumulate_q8_ref(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                              size_t ldacc);

void packed_scores_avx2(const PackedBlockView& b, const float* q, size_t ldq, int nq, int t0, int n, float* s, size_t lds);
void packed_accumulate_avx2(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                            size_t ldacc);
void f16_scores_avx2(const uint16_t* x, size_t stride, int d, const float* q, size_t ldq, int nq, int n, float* s,
                     size_t lds);
void f16_accumulate_avx2(const uint16_t* x, size_t stride, int d, const float* w, size_t ldw, int nq, int n, float* acc,
                         size_t ldacc);
float exp_sum_avx2(float* s, int n, float m);
void packed_scores_q8_avx2(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds);
float max_value_avx2(const float* s, int n);
void packed_accumulate_q8_avx2(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                               size_t ldacc);

void packed_scores_avx512(const PackedBlockView& b, const float* q, size_t ldq, int nq, int t0, int n, float* s,
                          size_t lds);
void packed_accumulate_avx512(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n, float* acc,
                              size_t ldacc);
void f16_scores_avx512(const uint16_t* x, size_t stride, int d, const float* q, size_t ldq, int nq, int n, float* s,
                       size_t lds);
void f16_accumulate_avx512(const uint16_t* x, size_t stride, int d, const float* w, size_t ldw, int nq, int n,
                           float* acc, size_t ldacc);
float exp_sum_avx512(float* s, int n, float m);
void packed_scores_q8_avx512(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds);
void packed_accumulate_q8_avx512(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n,
                                 float* acc, size_t ldacc);

// AVX-512 VNNI (paged_attention_kernels_avx512vnni.cpp): callable only when cpu_features().avx512vnni.
void packed_scores_q8_avx512vnni(const PackedBlockView& b, const Q8Queries& q, int t0, int n, float* s, size_t lds);
void packed_accumulate_q8_avx512vnni(const PackedBlockView& b, const float* w, size_t ldw, int nq, int t0, int n,
                                     float* acc, size_t ldacc);

}  // namespace mpkv

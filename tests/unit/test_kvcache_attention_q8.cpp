// The int8 kernels (paged_attention_kernels.h) of every variant. Scores (packed_scores_q8) for
// uniform keys of 2, 4, 8 and 16 bits, per-token (one group per row) and per-channel (KIVI) groups,
// scale_mult 1 and not 1, head_dim 64 / 128 / 256:
//   1. the query quantizer against the rule, restated;
//   2. each variant against the integer definition (token axis) and against _ref (channel axis:
//      the int8 values come from the per-group fold, so _ref's integer dot is the definition);
//   3. each variant against dequantize-then-dot with the float query (double), within the q8
//      rounding tolerance below.
// Values (packed_accumulate_q8, int8 weights) for 2- and 4-bit codes: each variant against _ref and
// against the float-weight accumulation of dequantized values, within the weights' rounding.
// Saturated blocks (every code at its maximum, int8 queries / weights at +-127) put every partial
// integer sum of the kernels (s16 lanes folded before widening) at its bound: any overflow would
// show as a wrong score or value.
// AVX-512 cases skip on CPUs without it; on a VNNI CPU both the plain AVX-512 and the VNNI table
// run, and the VNNI token-axis scores must also give the plain ones' bits.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "attention/paged_attention.h"
#include "attention/paged_attention_kernels.h"
#include "quant/kv_quantizer.h"
#include "test_attention_kernels_support.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

// The fp32 epilogue around an exact integer dot: s = (S m)(qs dot) + Z sum(q) or qs' dot + zterm,
// a few roundings of terms of magnitude `mag`; the channel axis's zterm is a head_dim-term fp32
// sum in another order than _ref's (depth <= head_dim / 8 + 8 in the AVX2 tree).
constexpr double kQ8EpilogueRel = 6 * FLT_EPSILON;
double zterm_tolerance(int d, double abs_terms) { return (d / 8 + 8) * FLT_EPSILON * abs_terms; }

// The query's rounding: each int8 value q8_c stands for q_c within half a step (scale / 2; the
// rule multiplies by 1 / scale, itself rounded, so up to 127 * 2 eps more), and a code weighs that
// by code_c * S m (token axis; the folded query already holds S m on the channel axis). So
//   |s_q8 - s_float| <= step / 2 * (1 + 1e-4) * sum_c code_c [* S m]  (+ the epilogue above).
constexpr double kQ8HalfStep = 0.5 * (1 + 1e-4);

struct Case {
  GroupAxis axis;
  int bits, d;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (GroupAxis a : {GroupAxis::token, GroupAxis::channel})
    for (int b : {2, 4, 8, 16})
      for (int d : {64, 128, 256}) v.push_back({a, b, d});
  return v;
}

KvBlockLayout quantized_block(const Case& c, int tokens, std::vector<uint8_t>& blk) {
  QuantOptions o;
  o.method = c.axis == GroupAxis::channel ? QuantMethod::kivi : QuantMethod::uniform;
  o.role = KvRole::key;
  o.bits = c.bits;
  o.head_dim = c.d;
  if (c.axis == GroupAxis::channel) o.group = 16;
  const KvQuantizer qz(o, quant_kernels_for(Isa::scalar));
  const KvBlockLayout L = qz.block_layout(tokens);
  blk.assign(L.bytes, 0);
  const auto x = test::gaussian((size_t)tokens * c.d, 3 + c.bits + c.d, 4.0f);
  quant_kernels_for(Isa::scalar).quantize(L, x.data(), c.d, 0, tokens, blk.data());
  return L;
}

TEST(PagedAttentionQ8, QueryQuantizerFollowsTheRule) {
  for (int d : {64, 128}) {
    const int nq = 5;
    auto q = test::gaussian((size_t)nq * d, 50 + d);
    for (int c = 0; c < d; ++c) q[(size_t)2 * d + c] = 0.0f;  // an all-zero query: scale 0, values 0
    std::vector<int8_t> bytes;
    std::vector<float> params;
    const Q8Queries q8 = quantize_queries_q8(q.data(), d, nq, d, bytes, params);
    ASSERT_EQ(q8.f, q.data());
    for (int j = 0; j < nq; ++j) {
      float amax = 0, sum = 0;
      for (int c = 0; c < d; ++c) amax = std::max(amax, std::abs(q[(size_t)j * d + c])), sum += q[(size_t)j * d + c];
      ASSERT_FLOAT_EQ(q8.scale[j], amax / 127.0f);
      ASSERT_FLOAT_EQ(q8.sum[j], sum);
      for (int c = 0; c < d; ++c) {
        const int8_t v = q8.natural[(size_t)j * d + c];
        ASSERT_LE(std::abs(v), 127);
        if (amax == 0) ASSERT_EQ(v, 0);
        else ASSERT_NEAR(v, q[(size_t)j * d + c] / q8.scale[j], kQ8HalfStep);
      }
    }
  }
}

TEST(PagedAttentionQ8, ScoresMatchTheDefinitionAndTheFloatDot) {
  for (const Case& cs : cases()) {
    const int T = 48;  // channel axis: 3 token groups of 16; token axis: 6 folds of 8 rows
    std::vector<uint8_t> blk;
    KvBlockLayout L = quantized_block(cs, T, blk);
    ASSERT_TRUE(q8_scores_apply(L)) << cs.bits << " " << cs.d;
    const int d = cs.d;
    for (float mult : {1.0f, 0.37f}) {
      L.scale_mult = mult;
      const std::vector<double> xh = test::block_x_hat(L, blk.data());
      for (int nq : {1, 3, 6}) {
        const auto q = test::gaussian((size_t)nq * d, 70 + nq);
        std::vector<int8_t> bytes;
        std::vector<float> params;
        const Q8Queries q8 = quantize_queries_q8(q.data(), d, nq, d, bytes, params);
        // Row ranges: whole block, one with an 8-row tail (channel axis: whole groups), and one
        // starting and ending inside token groups / 16-row folds (odd start, a 6-row tail).
        const std::pair<int, int> ranges[] = {{0, T}, cs.axis == GroupAxis::channel ? std::pair{16, 32} : std::pair{3, 21}, {5, 38}};
        for (auto [t0, n] : ranges) {
          std::vector<float> s_ref((size_t)nq * kMaxKernelRows);
          paged_attention_kernels_for(Isa::scalar).packed_scores_q8({&L, blk.data(), nullptr}, q8, t0, n, s_ref.data(), kMaxKernelRows);
          std::vector<float> s_avx512;  // the plain AVX-512 table's scores, when this CPU runs it
          for (const PagedAttentionKernels* K : paged_attention_kernel_tables()) {
            const std::string what = std::string(K->name) + (cs.axis == GroupAxis::token ? " token" : " channel") +
                                     " bits " + std::to_string(cs.bits) + " d " + std::to_string(d) + " mult " +
                                     std::to_string(mult) + " nq " + std::to_string(nq) + " t0 " + std::to_string(t0);
            std::vector<float> s((size_t)nq * kMaxKernelRows, NAN);
            K->packed_scores_q8({&L, blk.data(), nullptr}, q8, t0, n, s.data(), kMaxKernelRows);
            if (std::string(K->name) == "avx512") s_avx512 = s;
            // VNNI, token axis: the same exact integer dots and the same fp32 epilogue as the 256-bit
            // kernels' 8-row folds, so the same bits on every row those cover (not their 1-row tail).
            if (std::string(K->name) == "avx512vnni" && cs.axis == GroupAxis::token) {
              for (int j = 0; j < nq; ++j)
                for (int i = 0; i < n - n % 8; ++i)
                  ASSERT_EQ(s[(size_t)j * kMaxKernelRows + i], s_avx512[(size_t)j * kMaxKernelRows + i]) << what << " q " << j << " row " << i;
            }
            for (int j = 0; j < nq; ++j) {
              const float* qj = &q[(size_t)j * d];
              for (int i = 0; i < n; ++i) {
                const int t = t0 + i;
                const float got = s[(size_t)j * kMaxKernelRows + i];
                double float_dot = 0, code_sum = 0, abs_terms = 0, z_abs = 0, step = 0, code_weight = 1;
                for (int c = 0; c < d; ++c) {
                  float_dot += qj[c] * xh[(size_t)t * d + c];
                  code_sum += get_code(L, blk.data(), t, c);
                  abs_terms += std::abs(qj[c] * xh[(size_t)t * d + c]);
                  z_abs += std::abs(qj[c] * fp16_to_fp32(load_half(blk.data(), L.zeros_offset, L.param_index(t, c))));
                }
                if (cs.axis == GroupAxis::token) {
                  // 2. The integer definition, exactly: S m qs (q8 . code) + Z sum(q).
                  int64_t dot = 0;
                  for (int c = 0; c < d; ++c) dot += (int64_t)q8.natural[(size_t)j * d + c] * get_code(L, blk.data(), t, c);
                  const double S = fp16_to_fp32(load_half(blk.data(), L.scales_offset, t)) * (double)mult;
                  const double Z = fp16_to_fp32(load_half(blk.data(), L.zeros_offset, t));
                  const double def = S * q8.scale[j] * (double)dot + Z * q8.sum[j];
                  const double mag = std::abs(S * q8.scale[j] * (double)dot) + std::abs(Z * q8.sum[j]);
                  ASSERT_NEAR(got, def, kQ8EpilogueRel * mag + 1e-30) << what << " q " << j << " row " << t;
                  step = q8.scale[j];
                  code_weight = S;
                } else {
                  // 2. The fold's int8 values are _ref's; the variants differ in fp32 only.
                  const double ref = s_ref[(size_t)j * kMaxKernelRows + i];
                  ASSERT_NEAR(got, ref, kQ8EpilogueRel * (abs_terms + z_abs) + zterm_tolerance(d, z_abs))
                      << what << " q " << j << " row " << t;
                  // The step of the group's folded query, restated: max_c |q_c S_c m| / 127.
                  const int tg = t / L.group;
                  for (int c = 0; c < d; ++c) {
                    const double sc = fp16_to_fp32(load_half(blk.data(), L.scales_offset, (size_t)tg * d + c)) * (double)mult;
                    step = std::max(step, std::abs(qj[c] * sc) / 127.0);
                  }
                }
                // 3. Dequantize-then-dot with the float query.
                const double tol = step * kQ8HalfStep * code_sum * code_weight + kQ8EpilogueRel * (abs_terms + z_abs) +
                                   zterm_tolerance(d, z_abs) + 1e-30;
                ASSERT_NEAR(got, float_dot, tol) << what << " (float dot) q " << j << " row " << t;
              }
            }
          }
        }
      }
    }
  }
}

// The weights' rounding: w8_i stands for w_i S_i m within step / 2 (times 1 + 1e-4, as the query
// rule), weighing code_i[c]: |acc_q8 - acc_float| <= step / 2 (1 + 1e-4) sum_i code_i[c] (+ fp32).
// The fp32 part: step * sum and sum_i w_i Z_i, the latter a row-count-deep sum in another order.
constexpr double kAccQ8Rel = 4 * FLT_EPSILON;
double bz_tolerance(int n, double abs_terms) { return (n / 8 + 8) * FLT_EPSILON * abs_terms; }

TEST(PagedAttentionQ8, AccumulateMatchesRefAndTheFloatWeights) {
  for (int bits : {2, 4}) {
    for (int d : {64, 128, 256}) {
      // The longest call (kMaxKernelRows rows: 2-bit past four 64-row widening blocks, 4-bit sixteen
      // 16-row ones, the whole 128-pair weight table), a short odd range and a single row.
      const int T = kMaxKernelRows;
      std::vector<uint8_t> blk;
      KvBlockLayout L = quantized_block({GroupAxis::token, bits, d}, T, blk);
      ASSERT_TRUE(q8_values_apply(L));
      for (float mult : {1.0f, 0.37f}) {
        L.scale_mult = mult;
        const std::vector<double> xh = test::block_x_hat(L, blk.data());
        for (int nq : {1, 3, 6}) {
          auto w = test::gaussian((size_t)nq * kMaxKernelRows, 90 + nq);
          for (float& x : w) x = std::abs(x);  // softmax weights: >= 0
          for (auto [t0, n] : {std::pair<int, int>{0, T}, {3, 21}, {7, 1}}) {
            const size_t ldacc = d + 8;
            std::vector<float> ref((size_t)nq * ldacc, 0.25f);
            paged_attention_kernels_for(Isa::scalar).packed_accumulate_q8({&L, blk.data(), nullptr}, w.data(), kMaxKernelRows, nq, t0, n, ref.data(), ldacc);
            for (const PagedAttentionKernels* K : paged_attention_kernel_tables()) {
              const std::string what = std::string(K->name) + " bits " + std::to_string(bits) + " d " +
                                       std::to_string(d) + " mult " + std::to_string(mult) + " nq " +
                                       std::to_string(nq) + " rows [" + std::to_string(t0) + ", +" + std::to_string(n) + ")";
              std::vector<float> acc((size_t)nq * ldacc, 0.25f);
              K->packed_accumulate_q8({&L, blk.data(), nullptr}, w.data(), kMaxKernelRows, nq, t0, n, acc.data(), ldacc);
              for (int j = 0; j < nq; ++j) {
                const float* wj = &w[(size_t)j * kMaxKernelRows];
                double amax = 0, z_abs = 0;
                for (int i = 0; i < n; ++i) {
                  const double S = fp16_to_fp32(load_half(blk.data(), L.scales_offset, t0 + i)) * (double)mult;
                  amax = std::max(amax, std::abs(wj[i] * S));
                  z_abs += std::abs(wj[i] * fp16_to_fp32(load_half(blk.data(), L.zeros_offset, t0 + i)));
                }
                const double step = amax / 127;
                for (int c = 0; c < d; ++c) {
                  double exact = 0.25, abs_terms = 0.25, code_sum = 0;
                  for (int i = 0; i < n; ++i) {
                    exact += wj[i] * xh[(size_t)(t0 + i) * d + c];
                    abs_terms += std::abs(wj[i] * xh[(size_t)(t0 + i) * d + c]);
                    code_sum += get_code(L, blk.data(), t0 + i, c);
                  }
                  const float got = acc[(size_t)j * ldacc + c];
                  ASSERT_NEAR(got, ref[(size_t)j * ldacc + c], kAccQ8Rel * (abs_terms + z_abs) + bz_tolerance(n, z_abs))
                      << what << " q " << j << " channel " << c;
                  ASSERT_NEAR(got, exact, step * kQ8HalfStep * code_sum + kAccQ8Rel * (abs_terms + z_abs) + bz_tolerance(n, z_abs))
                      << what << " (float weights) q " << j << " channel " << c;
                }
                for (size_t c = d; c < ldacc; ++c) ASSERT_EQ(acc[(size_t)j * ldacc + c], 0.25f) << what << " wrote past d";
              }
            }
          }
        }
      }
    }
  }
}

// A block of `tokens` rows whose codes are all 2^bits - 1, scales 1 and zeros 0 (x_hat = code m).
KvBlockLayout saturated_block(const Case& c, int tokens, std::vector<uint8_t>& blk) {
  const KvBlockLayout L = quantized_block(c, tokens, blk);
  std::fill(blk.begin() + (long)L.codes_offset, blk.begin() + (long)(L.codes_offset + L.codes_bytes), 0xFF);
  for (size_t p = L.scales_offset; p < L.zeros_offset; p += 2) blk[p] = 0x00, blk[p + 1] = 0x3C;  // fp16 1.0
  std::fill(blk.begin() + (long)L.zeros_offset, blk.end(), 0);
  return L;
}

TEST(PagedAttentionQ8, SaturatedScoresAreExact) {
  for (const Case& cs : cases()) {
    const int T = 64, d = cs.d;
    std::vector<uint8_t> blk;
    KvBlockLayout L = saturated_block(cs, T, blk);
    L.scale_mult = 0.37f;
    // Queries all +1, all -1 and half of each (q8 = +-127 on every channel).
    const int nq = 3;
    std::vector<float> q((size_t)nq * d);
    for (int c = 0; c < d; ++c) q[c] = 1.0f, q[(size_t)d + c] = -1.0f, q[(size_t)2 * d + c] = c < d / 2 ? 1.0f : -1.0f;
    std::vector<int8_t> bytes;
    std::vector<float> params;
    const Q8Queries q8 = quantize_queries_q8(q.data(), d, nq, d, bytes, params);
    const double code = (double)((1 << cs.bits) - 1);
    for (auto [t0, n] : {std::pair<int, int>{0, T}, {5, 50}, {17, 13}}) {
      std::vector<float> s_ref((size_t)nq * kMaxKernelRows);
      paged_attention_kernels_for(Isa::scalar).packed_scores_q8({&L, blk.data(), nullptr}, q8, t0, n, s_ref.data(), kMaxKernelRows);
      for (const PagedAttentionKernels* K : paged_attention_kernel_tables()) {
        const std::string what = std::string(K->name) + (cs.axis == GroupAxis::token ? " token" : " channel") + " bits " +
                                 std::to_string(cs.bits) + " d " + std::to_string(d) + " t0 " + std::to_string(t0);
        std::vector<float> s((size_t)nq * kMaxKernelRows, NAN);
        K->packed_scores_q8({&L, blk.data(), nullptr}, q8, t0, n, s.data(), kMaxKernelRows);
        for (int j = 0; j < nq; ++j) {
          int64_t dot = 0;
          for (int c = 0; c < d; ++c) dot += (int64_t)q8.natural[(size_t)j * d + c] * (int64_t)code;
          ASSERT_EQ(std::abs(dot), j < 2 ? 127 * (int64_t)code * d : 0) << what;
          for (int i = 0; i < n; ++i) {
            const float got = s[(size_t)j * kMaxKernelRows + i];
            const double ref = s_ref[(size_t)j * kMaxKernelRows + i];
            ASSERT_NEAR(got, ref, kQ8EpilogueRel * std::abs(ref)) << what << " q " << j << " row " << t0 + i;
            if (cs.axis == GroupAxis::token) {  // the integer definition: S m qs (q8 . code), Z = 0
              const double def = (double)L.scale_mult * q8.scale[j] * (double)dot;
              ASSERT_NEAR(got, def, kQ8EpilogueRel * std::abs(def)) << what << " q " << j << " row " << t0 + i;
            }
          }
        }
      }
    }
  }
}

TEST(PagedAttentionQ8, SaturatedValuesAreExact) {
  for (int bits : {2, 4}) {
    for (int d : {64, 128}) {
      const int T = kMaxKernelRows;
      std::vector<uint8_t> blk;
      KvBlockLayout L = saturated_block({GroupAxis::token, bits, d}, T, blk);
      L.scale_mult = 0.37f;
      // Weights all +1, all -1 (w8 = +-127 on every row) and alternating +1 / -1.
      const int nq = 3;
      std::vector<float> w((size_t)nq * kMaxKernelRows);
      for (int i = 0; i < kMaxKernelRows; ++i)
        w[i] = 1.0f, w[(size_t)kMaxKernelRows + i] = -1.0f, w[(size_t)2 * kMaxKernelRows + i] = i % 2 ? -1.0f : 1.0f;
      for (auto [t0, n] : {std::pair<int, int>{0, T}, {3, 201}, {1, 64}}) {
        const size_t ldacc = d;
        std::vector<float> ref((size_t)nq * ldacc, 0.0f);
        paged_attention_kernels_for(Isa::scalar).packed_accumulate_q8({&L, blk.data(), nullptr}, w.data(), kMaxKernelRows, nq, t0, n, ref.data(), ldacc);
        for (const PagedAttentionKernels* K : paged_attention_kernel_tables()) {
          const std::string what = std::string(K->name) + " bits " + std::to_string(bits) + " d " + std::to_string(d) +
                                   " rows [" + std::to_string(t0) + ", +" + std::to_string(n) + ")";
          std::vector<float> acc((size_t)nq * ldacc, 0.0f);
          K->packed_accumulate_q8({&L, blk.data(), nullptr}, w.data(), kMaxKernelRows, nq, t0, n, acc.data(), ldacc);
          for (int j = 0; j < nq; ++j) {
            // step = m / 127, w8 = +-127: acc = m sum_i w_i code, exactly up to fp32 rounding.
            double exact = 0;
            for (int i = 0; i < n; ++i) exact += (double)w[(size_t)j * kMaxKernelRows + i] * ((1 << bits) - 1) * L.scale_mult;
            for (int c = 0; c < d; ++c) {
              const float got = acc[(size_t)j * ldacc + c];
              ASSERT_NEAR(got, ref[(size_t)j * ldacc + c], kAccQ8Rel * std::abs(exact) + 1e-6) << what << " q " << j << " channel " << c;
              ASSERT_NEAR(got, exact, kAccQ8Rel * std::abs(exact) + 1e-6) << what << " (definition) q " << j << " channel " << c;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mpkv

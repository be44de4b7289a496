// Key smoothing: pair lambdas by hand, q.k unchanged through RoPE, equivalence with folding the
// scales into W_q / W_k and their biases, key maxima, and the alpha search on keys with outliers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "calib/quantized_pairs.h"
#include "calib/smoothing.h"
#include "kvcache/kv_cache_factory.h"
#include "quant/kv_quantizer.h"
#include "model/ops.h"
#include "util/error.h"

namespace mpkv::calib {
namespace {

// q.k after scaling: (lambda q) . (k / lambda) in float, each product rounded once more than the
// unscaled one; relative to sum |q_i k_i| this stays within a few float ulps per term.
constexpr double kDotRel = 1e-5;

TEST(Smoothing, PairLambdaByHand) {
  const float m[4] = {1, 4, 9, 2};
  // adjacent pairs (0,1), (2,3): maxima 4 and 9 -> sqrt -> 2, 3.
  EXPECT_EQ(pair_lambda(m, 1, 4, RopeStyle::adjacent, 0.5), (std::vector<float>{2, 2, 3, 3}));
  // neox pairs (0,2), (1,3): maxima 9 and 4.
  EXPECT_EQ(pair_lambda(m, 1, 4, RopeStyle::neox, 0.5), (std::vector<float>{3, 2, 3, 2}));
  EXPECT_EQ(pair_lambda(m, 1, 4, RopeStyle::adjacent, 1.0), (std::vector<float>{4, 4, 9, 9}));
  // Two KV heads: pairs never cross heads.
  const float m2[4] = {1, 16, 4, 0};
  EXPECT_EQ(pair_lambda(m2, 2, 2, RopeStyle::adjacent, 0.5), (std::vector<float>{4, 4, 2, 2}));
  // A dead pair is clamped, not zero.
  const float z[2] = {0, 0};
  const auto lz = pair_lambda(z, 1, 2, RopeStyle::neox, 1.0);
  EXPECT_FLOAT_EQ(lz[0], kMinKeyMax);
  EXPECT_GT(lz[0], 0.0f);
}

TEST(Smoothing, DefaultAlphaGrid) {
  const auto g = default_alpha_grid();
  ASSERT_EQ(g.size(), 21u);
  EXPECT_DOUBLE_EQ(g.front(), 1.0);
  EXPECT_NEAR(g[1], 0.95, 1e-12);
  EXPECT_NEAR(g[19], 0.05, 1e-12);
  EXPECT_EQ(g.back(), 0.0);  // no smoothing is a candidate
  const auto one = pair_lambda(std::vector<float>{3.0f, 0.5f}.data(), 1, 2, RopeStyle::neox, 0.0);
  EXPECT_FLOAT_EQ(one[0], 1.0f);
  EXPECT_FLOAT_EQ(one[1], 1.0f);
}

TEST(Smoothing, KeyMaximaTrackAbsoluteMaxPerChannel) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.head_dim = 2;
  KeyMaxima m = KeyMaxima::for_model(c);
  const float k1[4] = {1, -3, -2, 0.5f};  // 2 tokens
  const float k2[2] = {0.5f, 2};
  m.observe(1, 2, k1);
  m.observe(1, 1, k2);
  EXPECT_EQ(m.max_abs[1], (std::vector<float>{2, 3}));
  EXPECT_EQ(m.max_abs[0], (std::vector<float>{0, 0}));
  EXPECT_THROW(m.observe(2, 1, k2), Error);
}

SmoothingScales random_scales(int n_head, int n_head_kv, int hd, RopeStyle style, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.1f, 10.0f);
  std::vector<float> mx((size_t)n_head_kv * hd);
  for (auto& x : mx) x = u(rng);
  SmoothingScales s;
  s.n_layer = 1;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim = hd;
  s.rope_style = style;
  s.alpha = {0.7};
  s.lambda = {pair_lambda(mx.data(), n_head_kv, hd, style, 0.7)};
  return s;
}

// Scaling before RoPE leaves every post-RoPE q.k (each query head against its KV head) unchanged.
TEST(Smoothing, QueryKeyDotUnchangedThroughRope) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int n = 6, H = 4, Hkv = 2, hd = 16, group = H / Hkv;
  for (RopeStyle style : {RopeStyle::adjacent, RopeStyle::neox}) {
    const SmoothingScales s = random_scales(H, Hkv, hd, style, rng);
    std::vector<float> q(n * H * hd), k(n * Hkv * hd);
    for (auto& x : q) x = nd(rng);
    for (auto& x : k) x = nd(rng) * 5;
    std::vector<float> qs = q, ks = k;
    apply_smoothing(s, 0, n, qs.data(), ks.data());
    std::vector<int> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = 37 * i + 5;
    for (auto* x : {&q, &qs}) rope_forward(x->data(), pos.data(), n, H, hd, RopeParams{style, 10000.0f, 1.0f}, 4.0f);
    for (auto* x : {&k, &ks}) rope_forward(x->data(), pos.data(), n, Hkv, hd, RopeParams{style, 10000.0f, 1.0f}, 4.0f);
    double changed = 0;
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        for (int h = 0; h < H; ++h) {
          const float* qa = q.data() + (a * H + h) * hd;
          const float* qsa = qs.data() + (a * H + h) * hd;
          const float* kb = k.data() + (b * Hkv + h / group) * hd;
          const float* ksb = ks.data() + (b * Hkv + h / group) * hd;
          double d0 = 0, d1 = 0, mag = 0;
          for (int i = 0; i < hd; ++i) d0 += (double)qa[i] * kb[i], d1 += (double)qsa[i] * ksb[i], mag += std::fabs(qa[i] * kb[i]);
          EXPECT_NEAR(d1, d0, kDotRel * mag);
        }
    // And the keys did change (the test would pass trivially with lambda = 1).
    for (size_t i = 0; i < k.size(); ++i) changed += std::fabs(ks[i] - k[i]);
    EXPECT_GT(changed, 1.0);
  }
}

// apply_smoothing after x W^T + b equals the folded weights: W_q rows * lambda, b_q * lambda,
// W_k rows / lambda, b_k / lambda.
TEST(Smoothing, EqualsFoldingIntoWeightsAndBiases) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int n = 3, d = 12, H = 2, Hkv = 1, hd = 8, qd = H * hd, kvd = Hkv * hd;
  const SmoothingScales s = random_scales(H, Hkv, hd, RopeStyle::adjacent, rng);
  std::vector<float> x(n * d), wq(qd * d), wk(kvd * d), bq(qd), bk(kvd);
  for (auto* v : {&x, &wq, &wk, &bq, &bk})
    for (auto& e : *v) e = nd(rng);
  auto project = [&](const std::vector<float>& w, const std::vector<float>& b, int rows) {
    std::vector<float> y(n * rows);
    for (int t = 0; t < n; ++t)
      for (int r = 0; r < rows; ++r) {
        double acc = b[r];
        for (int j = 0; j < d; ++j) acc += (double)w[r * d + j] * x[t * d + j];
        y[t * rows + r] = (float)acc;
      }
    return y;
  };
  std::vector<float> q = project(wq, bq, qd), k = project(wk, bk, kvd);
  apply_smoothing(s, 0, n, q.data(), k.data());
  std::vector<float> wqf = wq, wkf = wk, bqf = bq, bkf = bk;
  for (int r = 0; r < qd; ++r) {
    const float l = s.lambda[0][r % hd];  // query head r / hd reads KV head 0
    for (int j = 0; j < d; ++j) wqf[r * d + j] *= l;
    bqf[r] *= l;
  }
  for (int r = 0; r < kvd; ++r) {
    for (int j = 0; j < d; ++j) wkf[r * d + j] /= s.lambda[0][r];
    bkf[r] /= s.lambda[0][r];
  }
  const auto qf = project(wqf, bqf, qd), kf = project(wkf, bkf, kvd);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(q[i], qf[i], 1e-4 * (1 + std::fabs(qf[i])));
  for (size_t i = 0; i < k.size(); ++i) EXPECT_NEAR(k[i], kf[i], 1e-4 * (1 + std::fabs(kf[i])));
}

TEST(Smoothing, ApplyChecksShapesAndSkipsEmpty) {
  SmoothingScales empty;
  float q[4] = {1, 2, 3, 4}, k[2] = {5, 6};
  apply_smoothing(empty, 3, 1, q, k);
  EXPECT_EQ(q[0], 1);
  EXPECT_EQ(k[1], 6);
  std::mt19937 rng(1);
  SmoothingScales s = random_scales(2, 1, 2, RopeStyle::neox, rng);
  EXPECT_THROW(apply_smoothing(s, 1, 1, q, k), Error);
  s.lambda[0].pop_back();
  EXPECT_THROW(apply_smoothing(s, 0, 1, q, k), Error);
}

TEST(Smoothing, JsonRoundTripAndRejection) {
  std::mt19937 rng(2);
  const SmoothingScales s = random_scales(4, 2, 8, RopeStyle::neox, rng);
  const nlohmann::json j = s;
  const SmoothingScales r = j.get<SmoothingScales>();
  EXPECT_EQ(r.lambda, s.lambda);
  EXPECT_EQ(r.alpha, s.alpha);
  EXPECT_EQ(r.rope_style, RopeStyle::neox);
  nlohmann::json bad = j;
  bad["lambda"][0][3] = -1.0;
  EXPECT_THROW(bad.get<SmoothingScales>(), Error);
  bad = j;
  bad["lambda"][0].erase(0);
  EXPECT_THROW(bad.get<SmoothingScales>(), Error);
  bad = j;
  bad["rope_pairs"] = "diagonal";
  EXPECT_THROW(bad.get<SmoothingScales>(), Error);
}

// Keys whose few outlier channels dominate each token's range: per-token 4-bit codes lose the
// other channels, and smoothing (dividing the outliers down) must lower the attention error.
struct OutlierLayer {
  ModelConfig c;
  std::vector<AttentionSample> samples;
  std::vector<float> max_abs;
};

OutlierLayer outlier_layer(uint64_t seed) {
  OutlierLayer o;
  o.c.n_layer = 1;
  o.c.n_head = 4;
  o.c.n_head_kv = 2;
  o.c.head_dim = 32;
  o.c.rope_style = RopeStyle::adjacent;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const int T = 96, qd = 4 * 32, kvd = 2 * 32;
  o.max_abs.assign(kvd, 0.0f);
  for (int s = 0; s < 2; ++s) {
    AttentionSample a;
    a.n_tokens = T;
    a.q.resize(T * qd);
    a.k.resize(T * kvd);
    a.v.resize(T * kvd);
    for (auto& x : a.q) x = nd(rng);
    for (auto& x : a.v) x = nd(rng);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < kvd; ++i) {
        const bool outlier = i % 32 == 4 || i % 32 == 5;  // one RoPE pair per head
        a.k[t * kvd + i] = nd(rng) * (outlier ? 40.0f : 1.0f);
        o.max_abs[i] = std::max(o.max_abs[i], std::fabs(a.k[t * kvd + i]));
      }
    o.samples.push_back(std::move(a));
  }
  return o;
}

TEST(Smoothing, AlphaSearchPicksTheLowestErrorAndBeatsNoSmoothing) {
  const OutlierLayer o = outlier_layer(9);
  SmoothingSearchOptions opt;
  opt.key.head_dim = opt.value.head_dim = 32;
  opt.query_stride = 3;
  const LayerAlphaSearch r = search_layer_alpha(o.c, 0, o.samples, o.max_abs.data(), opt);
  ASSERT_EQ(r.mse.size(), 21u);
  // The reported MSEs are those attention_output_mse gives for each alpha alone.
  for (int i : {0, 7, 19}) {
    const auto lam = pair_lambda(o.max_abs.data(), 2, 32, RopeStyle::adjacent, opt.alphas[i]);
    EXPECT_NEAR(r.mse[i], attention_output_mse(o.c, 0, o.samples, lam.data(), opt), 1e-12 + 1e-9 * r.mse[i]);
  }
  EXPECT_NEAR(r.mse_unsmoothed, attention_output_mse(o.c, 0, o.samples, nullptr, opt), 1e-12);
  EXPECT_NEAR(r.mse[20], r.mse_unsmoothed, 1e-12 + 1e-9 * r.mse_unsmoothed);  // alpha 0: lambda = 1
  double best = r.mse[0];
  for (double m : r.mse) best = std::min(best, m);
  const size_t chosen = std::find(opt.alphas.begin(), opt.alphas.end(), r.alpha) - opt.alphas.begin();
  ASSERT_LT(chosen, opt.alphas.size());
  EXPECT_EQ(r.mse[chosen], best);
  EXPECT_LT(best, 0.5 * r.mse_unsmoothed) << "smoothing should at least halve the error on outlier keys";
}

TEST(Smoothing, SixteenBitQuantizersGiveAlmostNoError) {
  const OutlierLayer o = outlier_layer(4);
  SmoothingSearchOptions opt;
  opt.key.head_dim = opt.value.head_dim = 32;
  opt.key.bits = opt.value.bits = 16;
  const SmoothingSearchOptions opt4 = [&] { auto x = opt; x.key.bits = x.value.bits = 4; return x; }();
  const double m16 = attention_output_mse(o.c, 0, o.samples, nullptr, opt);
  const double m4 = attention_output_mse(o.c, 0, o.samples, nullptr, opt4);
  EXPECT_LT(m16, 1e-6 * m4);
  EXPECT_GT(m4, 0.0);
}

// The attention-output MSE of the runtime's attention, written out per query: query t sees keys
// [max(0, t - W + 1), t]; keys in [k0, k1) of `pairs` are lambda Q(k / lambda) and values Q(v), with
// rows quantized per head from `first` on in whole token groups; every other key and value exact.
double naive_runtime_mse(const OutlierLayer& o, const float* lambda, const QuantOptions& kq_o, const QuantOptions& vq_o,
                         int stride, int window, int first, const QuantizedKeyRange& pairs) {
  const ModelConfig& c = o.c;
  const int hd = c.head_dim, kvd = c.n_head_kv * hd, qd = c.n_head * hd, group = c.n_head / c.n_head_kv;
  const KvQuantizer kq(kq_o), vq(vq_o);
  double se = 0;
  size_t count = 0;
  for (const AttentionSample& s : o.samples) {
    const int T = s.n_tokens;
    // Quantized rows per head: [first, first + whole groups).
    std::vector<double> khat(s.k.begin(), s.k.end()), vhat(s.v.begin(), s.v.end());
    for (int h = 0; h < c.n_head_kv; ++h)
      for (int role = 0; role < 2; ++role) {
        const KvQuantizer& q = role == 0 ? kq : vq;
        const int n = (T - first) / q.token_granularity() * q.token_granularity();
        std::vector<float> rows((size_t)n * hd), back(rows.size());
        for (int t = 0; t < n; ++t)
          for (int i = 0; i < hd; ++i) {
            const float x = (role == 0 ? s.k : s.v)[(size_t)(first + t) * kvd + h * hd + i];
            rows[(size_t)t * hd + i] = role == 0 && lambda ? x / lambda[h * hd + i] : x;
          }
        q.quantize_dequantize(rows.data(), n, back.data());
        for (int t = 0; t < n; ++t)
          for (int i = 0; i < hd; ++i) {
            const double y = back[(size_t)t * hd + i];
            (role == 0 ? khat : vhat)[(size_t)(first + t) * kvd + h * hd + i] =
                role == 0 && lambda ? y * lambda[h * hd + i] : y;
          }
      }
    for (int t = T - 1; t >= 0; t -= stride) {
      const int lo = window > 0 ? std::max(0, t - window + 1) : 0;
      int k0 = 0, k1 = 0;
      pairs(0, t, k0, k1);
      for (int h = 0; h < c.n_head; ++h) {
        const int g = h / group;
        std::vector<double> pe(t + 1), pq(t + 1);
        for (int pass = 0; pass < 2; ++pass) {  // 0: exact, 1: the runtime's mix
          std::vector<double>& p = pass ? pq : pe;
          double m = -1e300, sum = 0;
          for (int j = lo; j <= t; ++j) {
            const bool quant = pass == 1 && j >= k0 && j < k1;
            double d = 0;
            for (int i = 0; i < hd; ++i)
              d += (double)s.q[(size_t)t * qd + h * hd + i] *
                   (quant ? khat[(size_t)j * kvd + g * hd + i] : (double)s.k[(size_t)j * kvd + g * hd + i]);
            p[j] = d / std::sqrt((double)hd);
            m = std::max(m, p[j]);
          }
          for (int j = lo; j <= t; ++j) sum += (p[j] = std::exp(p[j] - m));
          for (int j = lo; j <= t; ++j) p[j] /= sum;
        }
        for (int i = 0; i < hd; ++i) {
          double ye = 0, yq = 0;
          for (int j = lo; j <= t; ++j) {
            const bool quant = j >= k0 && j < k1;
            ye += pe[j] * s.v[(size_t)j * kvd + g * hd + i];
            yq += pq[j] * (quant ? vhat[(size_t)j * kvd + g * hd + i] : (double)s.v[(size_t)j * kvd + g * hd + i]);
          }
          se += (yq - ye) * (yq - ye);
          ++count;
        }
      }
    }
  }
  return se / (double)count;
}

// The alpha search scores only what the runtime quantizes (docs/calibration.md "What the runtime
// quantizes": the sink and the fp16 window read exact keys and values) and honours a sliding-window
// layer's window.
TEST(Smoothing, SearchScoresOnlyTheRuntimesQuantizedPairs) {
  OutlierLayer o = outlier_layer(11);
  for (const int window : {0, 40}) {
    o.c.layer_attn.assign(1, LayerAttention{});
    o.c.layer_attn[0].window = window;
    KvCacheOptions ko;
    ko.method = KvMethod::uniform;
    ko.bits = 3;
    ko.window = 24;
    ko.sink = 1;
    ko.page_tokens = 16;
    const KvPlan plan = make_kv_plan(ko, o.c.kv_dims());
    const QuantizedPairs pairs(plan);
    SmoothingSearchOptions opt;
    opt.key = {QuantMethod::uniform, KvRole::key, 3, 32, 0};
    opt.value = {QuantMethod::uniform, KvRole::value, 3, 32, 0};
    opt.query_stride = 5;
    opt.quantized_pairs = pairs.range();
    opt.first_quantized = pairs.sink();
    int k0 = 0, k1 = 0;
    pairs.keys(0, 95, k0, k1);
    ASSERT_EQ(k0, 1);
    ASSERT_GT(k1, k0);
    ASSERT_LT(k1, 96 - 16) << "the fp16 window must hold the newest keys";
    const auto lam = pair_lambda(o.max_abs.data(), 2, 32, RopeStyle::adjacent, 0.5);
    for (const float* l : {(const float*)nullptr, lam.data()}) {
      const double want = naive_runtime_mse(o, l, opt.key, opt.value, opt.query_stride, window, 1, opt.quantized_pairs);
      const double got = attention_output_mse(o.c, 0, o.samples, l, opt);
      EXPECT_NEAR(got, want, 1e-4 * want) << "window " << window;
      EXPECT_GT(want, 0.0);
    }
    // Every pair quantized (no range) is the papers' harness: a larger error than the runtime's.
    SmoothingSearchOptions all = opt;
    all.quantized_pairs = nullptr;
    all.first_quantized = 0;
    const QuantizedKeyRange everything = [](int, int t, int& a, int& b) { a = 0; b = t + 1; };
    const double all_want = naive_runtime_mse(o, nullptr, opt.key, opt.value, opt.query_stride, window, 0, everything);
    EXPECT_NEAR(attention_output_mse(o.c, 0, o.samples, nullptr, all), all_want, 1e-4 * all_want);
    EXPECT_GT(all_want, attention_output_mse(o.c, 0, o.samples, nullptr, opt));
    // No quantized pair at all: no error, whatever the smoothing.
    SmoothingSearchOptions none = opt;
    none.quantized_pairs = [](int, int, int& a, int& b) { a = b = 0; };
    EXPECT_EQ(attention_output_mse(o.c, 0, o.samples, lam.data(), none), 0.0);
    const LayerAlphaSearch r = search_layer_alpha(o.c, 0, o.samples, o.max_abs.data(), opt);
    const size_t i = std::find(opt.alphas.begin(), opt.alphas.end(), 0.5) - opt.alphas.begin();
    ASSERT_LT(i, opt.alphas.size());
    EXPECT_NEAR(r.mse[i], attention_output_mse(o.c, 0, o.samples, lam.data(), opt), 1e-12 + 1e-9 * r.mse[i]);
  }
}

TEST(Smoothing, SearchRejectsBadInput) {
  const OutlierLayer o = outlier_layer(1);
  SmoothingSearchOptions opt;
  opt.key.head_dim = opt.value.head_dim = 32;
  EXPECT_THROW(search_layer_alpha(o.c, 0, {}, o.max_abs.data(), opt), Error);
  auto bad = opt;
  bad.alphas = {1.5};
  EXPECT_THROW(search_layer_alpha(o.c, 0, o.samples, o.max_abs.data(), bad), Error);
  bad = opt;
  bad.query_stride = 0;
  EXPECT_THROW(search_layer_alpha(o.c, 0, o.samples, o.max_abs.data(), bad), Error);
  bad = opt;
  bad.key.bits = 5;
  EXPECT_THROW(search_layer_alpha(o.c, 0, o.samples, o.max_abs.data(), bad), Error);
  EXPECT_THROW(search_layer_alpha(o.c, 1, o.samples, o.max_abs.data(), opt), Error);  // one layer only
  bad = opt;
  bad.first_quantized = -1;
  EXPECT_THROW(search_layer_alpha(o.c, 0, o.samples, o.max_abs.data(), bad), Error);
  auto samples = o.samples;
  samples[0].k.pop_back();
  EXPECT_THROW(search_layer_alpha(o.c, 0, samples, o.max_abs.data(), opt), Error);
}

}  // namespace
}  // namespace mpkv::calib

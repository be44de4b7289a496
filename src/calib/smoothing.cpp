#include "calib/smoothing.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "calib/train_ops.h"
#include "quant/kv_quantizer.h"
#include "util/error.h"

namespace mpkv::calib {

KeyMaxima KeyMaxima::for_model(const ModelConfig& c) {
  KeyMaxima m;
  m.n_layer = c.n_layer;
  m.n_head_kv = c.n_head_kv;
  m.head_dim = c.head_dim;
  m.max_abs.assign(c.n_layer, std::vector<float>(c.kv_dim(), 0.0f));
  return m;
}

void KeyMaxima::observe(int layer, int n, const float* k) {
  MPKV_CHECK(layer >= 0 && layer < n_layer, "key maxima: layer " + std::to_string(layer) + " out of range");
  std::vector<float>& m = max_abs[layer];
  const size_t w = m.size();
  for (int t = 0; t < n; ++t)
    for (size_t i = 0; i < w; ++i) m[i] = std::max(m[i], std::fabs(k[(size_t)t * w + i]));
  if (layer == 0) tokens_seen += n;
}

std::vector<float> pair_lambda(const float* max_abs, int n_head_kv, int head_dim, RopeStyle style, double alpha) {
  MPKV_CHECK(head_dim % 2 == 0, "smoothing: head_dim must be even");
  const int half = head_dim / 2;
  std::vector<float> lambda((size_t)n_head_kv * head_dim);
  for (int h = 0; h < n_head_kv; ++h) {
    for (int j = 0; j < half; ++j) {
      const int a = h * head_dim + (style == RopeStyle::adjacent ? 2 * j : j);
      const int b = h * head_dim + (style == RopeStyle::adjacent ? 2 * j + 1 : j + half);
      const double m = std::max({(double)max_abs[a], (double)max_abs[b], (double)kMinKeyMax});
      lambda[a] = lambda[b] = (float)std::pow(m, alpha);
    }
  }
  return lambda;
}

std::vector<double> default_alpha_grid() {
  std::vector<double> g;
  for (int i = 20; i >= 0; --i) g.push_back(i * 0.05);  // ... 0.05, 0: alpha 0 is lambda = 1, no smoothing
  return g;
}

void apply_smoothing(const SmoothingScales& s, int layer, int n, float* q, float* k) {
  if (s.empty()) return;
  MPKV_CHECK(layer >= 0 && layer < (int)s.lambda.size(), "smoothing: no scales for layer " + std::to_string(layer));
  const std::vector<float>& lam = s.lambda[layer];
  const int hd = s.head_dim, kvd = s.n_head_kv * hd, group = s.n_head / s.n_head_kv;
  MPKV_CHECK((int)lam.size() == kvd, "smoothing: layer " + std::to_string(layer) + " has " +
                                         std::to_string(lam.size()) + " scales, expected " + std::to_string(kvd));
  for (int t = 0; t < n; ++t) {
    float* qt = q + (size_t)t * s.n_head * hd;
    for (int h = 0; h < s.n_head; ++h) {
      const float* l = lam.data() + (h / group) * hd;
      for (int i = 0; i < hd; ++i) qt[h * hd + i] *= l[i];
    }
    float* kt = k + (size_t)t * kvd;
    for (int i = 0; i < kvd; ++i) kt[i] /= lam[i];
  }
}

namespace {

// x [T, n_heads, hd] -> y: rows [first, T) of each head's [T, hd] column block through
// quantize_dequantize, token groups aligned at `first` (the cache's pages start after the sink);
// rows before it (the fp16 sink) and past the last whole token group (KIVI keys) stay exact.
void fake_quantize_heads(const KvQuantizer& qz, const float* x, float* y, int T, int n_heads, int hd, int first) {
  const int w = n_heads * hd;
  first = std::min(first, T);
  const int nq = (T - first) / qz.token_granularity() * qz.token_granularity();
  std::vector<float> a((size_t)T * hd), b((size_t)T * hd);
  for (int h = 0; h < n_heads; ++h) {
    for (int t = 0; t < T; ++t) std::copy_n(x + (size_t)t * w + h * hd, hd, a.data() + (size_t)t * hd);
    b = a;
    qz.quantize_dequantize(a.data() + (size_t)first * hd, nq, b.data() + (size_t)first * hd);
    for (int t = 0; t < T; ++t) std::copy_n(b.data() + (size_t)t * hd, hd, y + (size_t)t * w + h * hd);
  }
}

int n_scored(int T, int stride) { return (T - 1) / stride + 1; }

// One layer's attention as the runtime computes it: the layer's sliding window and which (query,
// key) pairs read quantized keys and values.
struct LayerScope {
  int window = 0;                     // 0: global
  const QuantizedKeyRange* pairs = nullptr;  // null: every pair quantized
  int layer = 0;
  // Keys [k0, k1) that query t reads quantized.
  void quantized(int t, int& k0, int& k1) const {
    if (!pairs || !*pairs) {
      k0 = 0;
      k1 = t + 1;
    } else {
      (*pairs)(layer, t, k0, k1);
    }
  }
};

LayerScope scope_of(const ModelConfig& c, int layer, const SmoothingSearchOptions& o) {
  LayerScope s;
  s.window = layer < (int)c.layer_attn.size() ? c.layer_attn[layer].window : 0;
  s.pairs = &o.quantized_pairs;
  s.layer = layer;
  return s;
}

// One sample's tensors: q [T, n_head, hd]; exact k, v and their quantized versions k_hat, v_hat
// [T, n_head_kv, hd] (k_hat == k and v_hat == v for the exact attention).
struct AttentionInputs {
  int T;
  const float *q, *k, *v, *k_hat, *v_hat;
};

// Attention output [nq, n_head * hd] of the scored queries t_i = T-1 - (nq-1-i) stride: query t
// sees keys [window_start(W, t), t], reading k_hat / v_hat for the quantized pairs of `scope` and
// k / v for the others (fp16 sink and window).
void scored_attention(const ModelConfig& c, const LayerScope& scope, int stride, const AttentionInputs& x, float* out,
                      std::vector<float>& S, std::vector<float>& S_hat) {
  const int T = x.T, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, nq = n_scored(T, stride);
  const int t0 = T - 1 - (nq - 1) * stride;
  const bool exact = x.k_hat == x.k && x.v_hat == x.v;
  const float sc = (float)(1.0 / std::sqrt((double)hd));
  S.resize((size_t)nq * T);
  S_hat.resize(exact ? 0 : (size_t)nq * T);
  for (int h = 0; h < c.n_head; ++h) {
    const int g = h / c.group_size();
    const float* qh = x.q + (size_t)t0 * qd + h * hd;
    gemm(false, true, nq, T, hd, sc, qh, stride * qd, x.k + g * hd, kvd, 0.0f, S.data(), T);
    if (!exact) gemm(false, true, nq, T, hd, sc, qh, stride * qd, x.k_hat + g * hd, kvd, 0.0f, S_hat.data(), T);
    for (int i = 0; i < nq; ++i) {
      const int t = t0 + i * stride, lo = window_start(scope.window, t);
      float* row = S.data() + (size_t)i * T;
      int k0 = 0, k1 = 0;
      if (!exact) {  // the quantized pairs' scores come from k_hat
        scope.quantized(t, k0, k1);
        k0 = std::max(k0, lo);
        k1 = std::min(k1, t + 1);
        for (int j = k0; j < k1; ++j) row[j] = S_hat[(size_t)i * T + j];
      }
      float m = row[lo];
      for (int j = lo + 1; j <= t; ++j) m = std::max(m, row[j]);
      double sum = 0;
      for (int j = lo; j <= t; ++j) sum += (row[j] = std::exp(row[j] - m));
      const float inv = (float)(1.0 / sum);
      std::fill(row, row + lo, 0.0f);
      for (int j = lo; j <= t; ++j) row[j] *= inv;
      std::fill(row + t + 1, row + T, 0.0f);
      if (!exact) {  // split the probabilities: quantized pairs read v_hat, the others v
        float* hat = S_hat.data() + (size_t)i * T;
        std::fill(hat, hat + T, 0.0f);
        for (int j = k0; j < k1; ++j) std::swap(hat[j], row[j]);
      }
    }
    gemm(false, false, nq, hd, T, 1.0f, S.data(), T, x.v + g * hd, kvd, 0.0f, out + h * hd, qd);
    if (!exact) gemm(false, false, nq, hd, T, 1.0f, S_hat.data(), T, x.v_hat + g * hd, kvd, 1.0f, out + h * hd, qd);
  }
}

// What every alpha shares: the exact outputs and the quantized values of each sample.
struct PreparedLayer {
  std::vector<std::vector<float>> ref, v_hat;
};

void check_samples(const ModelConfig& c, const std::vector<AttentionSample>& samples) {
  MPKV_CHECK(!samples.empty(), "smoothing search: no calibration samples");
  for (const AttentionSample& s : samples) {
    MPKV_CHECK(s.n_tokens >= 1 && s.q.size() == (size_t)s.n_tokens * c.q_dim() &&
                   s.k.size() == (size_t)s.n_tokens * c.kv_dim() && s.v.size() == s.k.size(),
               "smoothing search: a sample's q/k/v sizes do not match its token count");
  }
}

void check_options(const ModelConfig& c, int layer, const SmoothingSearchOptions& o) {
  MPKV_CHECK(layer >= 0 && layer < c.n_layer, "smoothing search: layer " + std::to_string(layer) + " out of range");
  MPKV_CHECK(o.query_stride >= 1, "smoothing search: query stride must be >= 1");
  MPKV_CHECK(o.first_quantized >= 0, "smoothing search: the first quantized position must be >= 0");
}

PreparedLayer prepare(const ModelConfig& c, const LayerScope& scope, const std::vector<AttentionSample>& samples,
                      const KvQuantizer& vq, const SmoothingSearchOptions& o) {
  PreparedLayer p;
  std::vector<float> S, S_hat;
  for (const AttentionSample& s : samples) {
    const int T = s.n_tokens;
    p.ref.emplace_back((size_t)n_scored(T, o.query_stride) * c.q_dim());
    const AttentionInputs exact{T, s.q.data(), s.k.data(), s.v.data(), s.k.data(), s.v.data()};
    scored_attention(c, scope, o.query_stride, exact, p.ref.back().data(), S, S_hat);
    p.v_hat.emplace_back(s.v.size());
    fake_quantize_heads(vq, s.v.data(), p.v_hat.back().data(), T, c.n_head_kv, c.head_dim, o.first_quantized);
  }
  return p;
}

double mse_with(const ModelConfig& c, const LayerScope& scope, const std::vector<AttentionSample>& samples,
                const PreparedLayer& p, const float* lambda, const KvQuantizer& kq, const SmoothingSearchOptions& o) {
  const int kvd = c.kv_dim();
  std::vector<float> ks, kh, out, S, S_hat;
  double se = 0;
  size_t count = 0;
  for (size_t si = 0; si < samples.size(); ++si) {
    const AttentionSample& s = samples[si];
    const int T = s.n_tokens;
    ks = s.k;
    if (lambda)
      for (size_t i = 0; i < ks.size(); ++i) ks[i] /= lambda[i % kvd];
    kh.resize(ks.size());
    fake_quantize_heads(kq, ks.data(), kh.data(), T, c.n_head_kv, c.head_dim, o.first_quantized);
    // q . (lambda Q(k / lambda)): the smoothed query against the smoothed quantized key.
    if (lambda)
      for (size_t i = 0; i < kh.size(); ++i) kh[i] *= lambda[i % kvd];
    out.resize(p.ref[si].size());
    const AttentionInputs x{T, s.q.data(), s.k.data(), s.v.data(), kh.data(), p.v_hat[si].data()};
    scored_attention(c, scope, o.query_stride, x, out.data(), S, S_hat);
    for (size_t i = 0; i < out.size(); ++i) {
      const double e = (double)out[i] - p.ref[si][i];
      se += e * e;
    }
    count += out.size();
  }
  return se / (double)count;
}

}  // namespace

double attention_output_mse(const ModelConfig& c, int layer, const std::vector<AttentionSample>& samples,
                            const float* lambda, const SmoothingSearchOptions& o) {
  check_samples(c, samples);
  check_options(c, layer, o);
  const KvQuantizer kq(o.key), vq(o.value);
  BlasSingleThread blas_guard;
  const LayerScope scope = scope_of(c, layer, o);
  const PreparedLayer p = prepare(c, scope, samples, vq, o);
  return mse_with(c, scope, samples, p, lambda, kq, o);
}

LayerAlphaSearch search_layer_alpha(const ModelConfig& c, int layer, const std::vector<AttentionSample>& samples,
                                    const float* max_abs, const SmoothingSearchOptions& o) {
  check_samples(c, samples);
  check_options(c, layer, o);
  MPKV_CHECK(!o.alphas.empty(), "smoothing search: empty alpha grid");
  for (double a : o.alphas) MPKV_CHECK(std::isfinite(a) && a >= 0 && a <= 1, "smoothing search: alpha outside [0, 1]");
  const KvQuantizer kq(o.key), vq(o.value);
  BlasSingleThread blas_guard;
  const LayerScope scope = scope_of(c, layer, o);
  const PreparedLayer p = prepare(c, scope, samples, vq, o);
  const int n = (int)o.alphas.size();
  LayerAlphaSearch r;
  r.mse.assign(n, 0.0);
  // Task n is the unsmoothed baseline.
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i <= n; ++i) {
    if (i == n) {
      r.mse_unsmoothed = mse_with(c, scope, samples, p, nullptr, kq, o);
    } else {
      const auto lambda = pair_lambda(max_abs, c.n_head_kv, c.head_dim, c.rope_style, o.alphas[i]);
      r.mse[i] = mse_with(c, scope, samples, p, lambda.data(), kq, o);
    }
  }
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (r.mse[i] < r.mse[best] || (r.mse[i] == r.mse[best] && o.alphas[i] > o.alphas[best])) best = i;
  r.alpha = o.alphas[best];
  return r;
}

void to_json(nlohmann::json& j, const SmoothingScales& s) {
  j = nlohmann::json{{"n_layer", s.n_layer},
                     {"n_head", s.n_head},
                     {"n_head_kv", s.n_head_kv},
                     {"head_dim", s.head_dim},
                     {"rope_pairs", s.rope_style == RopeStyle::adjacent ? "adjacent" : "neox"},
                     {"alpha", s.alpha},
                     {"lambda", s.lambda}};
}

void from_json(const nlohmann::json& j, SmoothingScales& s) {
  s.n_layer = j.at("n_layer").get<int>();
  s.n_head = j.at("n_head").get<int>();
  s.n_head_kv = j.at("n_head_kv").get<int>();
  s.head_dim = j.at("head_dim").get<int>();
  const std::string pairs = j.at("rope_pairs").get<std::string>();
  MPKV_CHECK(pairs == "adjacent" || pairs == "neox", "smoothing: rope_pairs must be adjacent or neox");
  s.rope_style = pairs == "adjacent" ? RopeStyle::adjacent : RopeStyle::neox;
  s.alpha = j.at("alpha").get<std::vector<double>>();
  s.lambda = j.at("lambda").get<std::vector<std::vector<float>>>();
  MPKV_CHECK(s.n_layer > 0 && s.n_head_kv > 0 && s.head_dim > 0 && s.n_head % s.n_head_kv == 0,
             "smoothing: bad head counts");
  MPKV_CHECK(s.lambda.empty() || (int)s.lambda.size() == s.n_layer, "smoothing: lambda needs one row per layer");
  for (const auto& l : s.lambda) {
    MPKV_CHECK((int)l.size() == s.n_head_kv * s.head_dim, "smoothing: a layer's lambda has the wrong length");
    for (float x : l) MPKV_CHECK(std::isfinite(x) && x > 0, "smoothing: lambda must be finite and positive");
  }
}

void to_json(nlohmann::json& j, const LayerAlphaSearch& r) {
  j = nlohmann::json{{"alpha", r.alpha}, {"mse", r.mse}, {"mse_unsmoothed", r.mse_unsmoothed}};
}

}  // namespace mpkv::calib

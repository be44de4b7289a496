#include "calib/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "quant/kv_quantizer.h"
#include "util/error.h"

namespace mpkv::calib {

double SensitivityReport::pmkvq_layer(int layer, int bit_index) const {
  double s = 0;
  for (int h = 0; h < n_head_kv; ++h) s += pmkvq_key[layer][h][bit_index] + pmkvq_value[layer][h][bit_index];
  return s;
}

SensitivityAccumulator::SensitivityAccumulator(const ModelConfig& c, const SensitivityOptions& o,
                                               const SmoothingScales* smoothing)
    : c_(c), o_(o), smoothing_(smoothing && !smoothing->empty() ? smoothing : nullptr) {
  MPKV_CHECK(!o.bits.empty(), "sensitivity: no candidate bit-widths");
  MPKV_CHECK(o.key.head_dim == c.head_dim && o.value.head_dim == c.head_dim,
             "sensitivity: quantizer head_dim " + std::to_string(o.key.head_dim) + " does not match the model's " +
                 std::to_string(c.head_dim));
  for (int b : o.bits) {
    QuantOptions k = o.key, v = o.value;
    k.bits = v.bits = b;
    k.role = KvRole::key;
    v.role = KvRole::value;
    validate(k);
    validate(v);
  }
  if (smoothing_) {
    MPKV_CHECK(smoothing_->n_layer == c.n_layer && smoothing_->n_head_kv == c.n_head_kv &&
                   smoothing_->head_dim == c.head_dim && (int)smoothing_->lambda.size() == c.n_layer,
               "sensitivity: smoothing scales are for another model shape");
  }
  const size_t nb = o.bits.size();
  sk_.assign(c.n_layer, std::vector<std::vector<double>>(c.n_head_kv, std::vector<double>(nb, 0.0)));
  sv_ = sk_;
  wk_.assign(c.n_layer, std::vector<double>(c.n_head_kv, 0.0));
  wv_ = wk_;
}

void SensitivityAccumulator::add(const KvGradients<float>& g) {
  const int L = c_.n_layer, H = c_.n_head_kv, hd = c_.head_dim, kvd = c_.kv_dim(), T = g.n_tokens;
  MPKV_CHECK((int)g.k.size() == L && (int)g.dk.size() == L && (int)g.v.size() == L && (int)g.dv.size() == L,
             "sensitivity: gradients for " + std::to_string(g.k.size()) + " layers, model has " + std::to_string(L));
  for (int l = 0; l < L; ++l)
    MPKV_CHECK(g.k[l].size() == (size_t)T * kvd && g.v[l].size() == g.k[l].size() && g.dk[l].size() == g.k[l].size() &&
                   g.dv[l].size() == g.k[l].size(),
               "sensitivity: layer " + std::to_string(l) + " arrays do not match [T, n_head_kv, head_dim]");
  // The gradient through the quantized pairs when the backward gave it.
  const bool pairs = !g.dk_q.empty();
  MPKV_CHECK(!pairs || ((int)g.dk_q.size() == L && (int)g.dv_q.size() == L),
             "sensitivity: quantized-pair gradients for " + std::to_string(g.dk_q.size()) + " layers");
  MPKV_CHECK(n_samples_ == 0 || pairs == pairs_, "sensitivity: sequences with and without quantized-pair gradients");
  pairs_ = pairs;
  const auto& dk = pairs ? g.dk_q : g.dk;
  const auto& dv = pairs ? g.dv_q : g.dv;
  const int t0 = std::min(o_.first_quantized, T);
  const int nb = (int)o_.bits.size();
  std::vector<std::unique_ptr<KvQuantizer>> kq, vq;
  for (int b : o_.bits) {
    QuantOptions k = o_.key, v = o_.value;
    k.bits = v.bits = b;
    k.role = KvRole::key;
    v.role = KvRole::value;
    kq.push_back(std::make_unique<KvQuantizer>(k));
    vq.push_back(std::make_unique<KvQuantizer>(v));
  }
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      const float* lam = smoothing_ ? smoothing_->lambda[l].data() + h * hd : nullptr;
      std::vector<float> x((size_t)T * hd), gr((size_t)T * hd), xq((size_t)T * hd);
      for (int role = 0; role < 2; ++role) {
        const std::vector<float>& X = role == 0 ? g.k[l] : g.v[l];
        const std::vector<float>& G = role == 0 ? dk[l] : dv[l];
        const bool smooth = role == 0 && lam;
        // This head's [T, hd], in the stored space (keys divided by lambda, gradients times it).
        double w = 0;
        for (int t = 0; t < T; ++t) {
          for (int i = 0; i < hd; ++i) {
            const size_t src = (size_t)t * kvd + h * hd + i, dst = (size_t)t * hd + i;
            x[dst] = smooth ? X[src] / lam[i] : X[src];
            gr[dst] = smooth ? G[src] * lam[i] : G[src];
            w += (double)gr[dst] * gr[dst];
          }
        }
        (role == 0 ? wk_ : wv_)[l][h] += w / T;
        for (int bi = 0; bi < nb; ++bi) {
          const KvQuantizer& q = role == 0 ? *kq[bi] : *vq[bi];
          const int nq = (T - t0) / q.token_granularity() * q.token_granularity();
          const size_t off = (size_t)t0 * hd;
          xq = x;
          q.quantize_dequantize(x.data() + off, nq, xq.data() + off);
          // G_stored (.) (x' - Q(x')) == G (.) (x - lambda Q(x / lambda)) elementwise.
          double s = 0;
          for (size_t i = off; i < off + (size_t)nq * hd; ++i)
            s += std::fabs((double)gr[i] * ((double)x[i] - xq[i]));
          (role == 0 ? sk_ : sv_)[l][h][bi] += s;
        }
      }
    }
  }
  ++n_samples_;
}

SensitivityReport SensitivityAccumulator::report() const {
  MPKV_CHECK(n_samples_ > 0, "sensitivity: no calibration sequence was added");
  SensitivityReport r;
  r.n_layer = c_.n_layer;
  r.n_head_kv = c_.n_head_kv;
  r.head_dim = c_.head_dim;
  r.n_samples = n_samples_;
  r.bits = o_.bits;
  r.key = o_.key;
  r.value = o_.value;
  r.smoothed = smoothing_ != nullptr;
  r.first_quantized = o_.first_quantized;
  r.quantized_pairs = pairs_;
  const double inv = 1.0 / n_samples_;
  r.pmkvq_key = sk_;
  r.pmkvq_value = sv_;
  r.w_key = wk_;
  r.w_value = wv_;
  for (int l = 0; l < c_.n_layer; ++l) {
    for (int h = 0; h < c_.n_head_kv; ++h) {
      for (auto& x : r.pmkvq_key[l][h]) x *= inv;
      for (auto& x : r.pmkvq_value[l][h]) x *= inv;
      r.w_key[l][h] *= inv;
      r.w_value[l][h] *= inv;
    }
  }
  return r;
}

void to_json(nlohmann::json& j, const SensitivityReport& r) {
  nlohmann::json layer = nlohmann::json::array();
  for (int l = 0; l < r.n_layer; ++l) {
    std::vector<double> s;
    for (size_t b = 0; b < r.bits.size(); ++b) s.push_back(r.pmkvq_layer(l, (int)b));
    layer.push_back(s);
  }
  j = nlohmann::json{{"n_layer", r.n_layer},
                     {"n_head_kv", r.n_head_kv},
                     {"head_dim", r.head_dim},
                     {"n_samples", r.n_samples},
                     {"bits", r.bits},
                     {"key_method", method_name(r.key.method)},
                     {"key_group", effective_group(r.key)},
                     {"value_method", method_name(r.value.method)},
                     {"value_group", effective_group(r.value)},
                     {"smoothed", r.smoothed},
                     {"first_quantized", r.first_quantized},
                     {"quantized_pairs", r.quantized_pairs},
                     {"pmkvq_layer", layer},
                     {"pmkvq_key", r.pmkvq_key},
                     {"pmkvq_value", r.pmkvq_value},
                     {"ratequant_w_key", r.w_key},
                     {"ratequant_w_value", r.w_value}};
}

}  // namespace mpkv::calib

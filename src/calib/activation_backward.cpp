#include "calib/activation_backward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "calib/train_ops.h"
#include "gguf/dequant.h"
#include "model/linear.h"
#include "util/error.h"

namespace mpkv::calib {

namespace {

template <typename Real>
std::vector<Real> dense_matrix(const WeightMatrix& w) {
  std::vector<float> f((size_t)w.rows * (size_t)w.cols);
  dequantize_matrix(w, f.data());
  if constexpr (std::is_same_v<Real, float>) {
    return f;
  } else {
    return std::vector<Real>(f.begin(), f.end());
  }
}

template <typename Real>
std::vector<Real> dense_vector(const VectorWeight& v) {
  if (!v.data) return {};
  return std::vector<Real>(v.data, v.data + v.n);
}

// LM-head rows per sgemm: logits for this many positions at once ([rows, n_vocab] floats), so the
// full [T, n_vocab] matrix never exists (T = 2048 x 49152 vocab would be 400 MB).
constexpr int kLmHeadRows = 128;

}  // namespace

template <typename Real>
ActivationBackward<Real>::ActivationBackward(const Model& model) : model_(model), config_(model.config()) {
  const ModelConfig& c = config_;
  MPKV_CHECK(c.rope_dim == 0 || c.rope_dim == c.head_dim,
             "calibration backward: partial RoPE (rope_dim " + std::to_string(c.rope_dim) + " < head_dim " +
                 std::to_string(c.head_dim) + ") is not supported");
  const ModelWeights& w = model.weights();
  layers_.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    DenseLayer& D = layers_[l];
    D.wq = dense_matrix<Real>(L.wq);
    D.wk = dense_matrix<Real>(L.wk);
    D.wv = dense_matrix<Real>(L.wv);
    D.wo = dense_matrix<Real>(L.wo);
    D.wg = dense_matrix<Real>(L.w_gate);
    D.wu = dense_matrix<Real>(L.w_up);
    D.wd = dense_matrix<Real>(L.w_down);
    D.attn_norm = dense_vector<Real>(L.attn_norm);
    D.ffn_norm = dense_vector<Real>(L.ffn_norm);
    if (c.qkv_bias) {
      D.bq = dense_vector<Real>(L.bq);
      D.bk = dense_vector<Real>(L.bk);
      D.bv = dense_vector<Real>(L.bv);
      MPKV_CHECK((int)D.bq.size() == c.q_dim() && (int)D.bk.size() == c.kv_dim() && (int)D.bv.size() == c.kv_dim(),
                 "calibration backward: layer " + std::to_string(l) + " lacks q/k/v biases");
    }
    if (c.qk_norm) {
      D.q_norm = dense_vector<Real>(L.q_norm);
      D.k_norm = dense_vector<Real>(L.k_norm);
      MPKV_CHECK((int)D.q_norm.size() == c.head_dim && (int)D.k_norm.size() == c.head_dim,
                 "calibration backward: layer " + std::to_string(l) + " lacks q/k norm weights");
    }
  }
  output_ = dense_matrix<Real>(w.output);
  output_norm_ = dense_vector<Real>(w.output_norm);
}

template <typename Real>
double ActivationBackward<Real>::loss(const std::vector<int32_t>& tokens, double pos_scale,
                                      const KvPerturbation* perturb, const QkvObserver<Real>& observer) {
  return forward(tokens, pos_scale, perturb, observer, false);
}

template <typename Real>
double ActivationBackward<Real>::forward(const std::vector<int32_t>& tokens, double pos_scale,
                                         const KvPerturbation* perturb, const QkvObserver<Real>& observer,
                                         bool keep) {
  const ModelConfig& c = config_;
  const int T = (int)tokens.size();
  MPKV_CHECK(T >= 2, "calibration backward: a sequence needs at least 2 tokens (got " + std::to_string(T) + ")");
  MPKV_CHECK(std::isfinite(pos_scale) && pos_scale > 0, "calibration backward: the position scale must be > 0");
  for (int32_t t : tokens)
    MPKV_CHECK(t >= 0 && t < c.n_vocab,
               "token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(c.n_vocab) + ")");
  if (perturb) {
    MPKV_CHECK(perturb->layer >= 0 && perturb->layer < c.n_layer && perturb->index < (size_t)T * c.kv_dim(),
               "calibration backward: perturbation outside the K/V arrays");
  }
  const size_t d = c.d_model;
  pos_.resize(T);
  for (int t = 0; t < T; ++t) pos_[t] = (double)t * pos_scale / c.rope_scale;
  x_.resize(T * d);
  std::vector<float> row(d);
  const WeightMatrix& E = model_.weights().token_embd;
  for (int t = 0; t < T; ++t) {
    dequantize_row(E.type, E.data + (size_t)tokens[t] * E.row_bytes, row.data(), c.d_model);
    std::copy(row.begin(), row.end(), x_.begin() + t * d);
  }
  saved_.resize(keep ? c.n_layer : 1);
  for (int l = 0; l < c.n_layer; ++l) layer_forward(l, T, perturb, observer, saved_[keep ? l : 0], keep);

  xf_.resize(T * d);
  inv_rms_f_.resize(T);
  rmsnorm_forward(x_.data(), output_norm_.data(), xf_.data(), inv_rms_f_.data(), T, c.d_model, c.rms_eps);
  return lm_head(tokens, keep);
}

template <typename Real>
void ActivationBackward<Real>::layer_forward(int l, int T, const KvPerturbation* perturb,
                                             const QkvObserver<Real>& observer, Saved& s, bool keep) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  const int d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, ff = c.d_ffn;
  const size_t n = T;

  if (keep) s.x_in.assign(x_.begin(), x_.end());
  xn_.resize(n * d);
  s.inv_rms1.resize(n);
  rmsnorm_forward(x_.data(), W.attn_norm.data(), xn_.data(), s.inv_rms1.data(), T, d, c.rms_eps);
  s.q.resize(n * qd);
  s.k.resize(n * kvd);
  s.v.resize(n * kvd);
  gemm(false, true, T, qd, d, Real(1), xn_.data(), d, W.wq.data(), d, Real(0), s.q.data(), qd);
  gemm(false, true, T, kvd, d, Real(1), xn_.data(), d, W.wk.data(), d, Real(0), s.k.data(), kvd);
  gemm(false, true, T, kvd, d, Real(1), xn_.data(), d, W.wv.data(), d, Real(0), s.v.data(), kvd);
  if (c.qkv_bias) {
    for (size_t t = 0; t < n; ++t) {
      for (int j = 0; j < qd; ++j) s.q[t * qd + j] += W.bq[j];
      for (int j = 0; j < kvd; ++j) s.k[t * kvd + j] += W.bk[j], s.v[t * kvd + j] += W.bv[j];
    }
  }
  if (c.qk_norm) {
    if (keep) s.q_pre = s.q, s.k_pre = s.k;
    s.rq.resize(n * c.n_head);
    s.rk.resize(n * c.n_head_kv);
    rmsnorm_forward(s.q.data(), W.q_norm.data(), s.q.data(), s.rq.data(), T * c.n_head, hd, c.rms_eps);
    rmsnorm_forward(s.k.data(), W.k_norm.data(), s.k.data(), s.rk.data(), T * c.n_head_kv, hd, c.rms_eps);
  }
  rope_rotate(s.q.data(), pos_.data(), T, c.n_head, hd, c.rope_style, c.rope_base, +1);
  rope_rotate(s.k.data(), pos_.data(), T, c.n_head_kv, hd, c.rope_style, c.rope_base, +1);
  if (perturb && perturb->layer == l) (perturb->role == KvRole::key ? s.k : s.v)[perturb->index] += (Real)perturb->delta;
  if (observer) observer(l, T, s.q.data(), s.k.data(), s.v.data());

  s.attn.resize(n * qd);
  s.lse.resize(n * c.n_head);
  attention_forward(T, s.q.data(), s.k.data(), s.v.data(), s.attn.data(), s.lse.data());
  tmp_.resize(n * d);
  gemm(false, true, T, d, qd, Real(1), s.attn.data(), qd, W.wo.data(), qd, Real(0), tmp_.data(), d);
  for (size_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];

  if (keep) s.x_mid.assign(x_.begin(), x_.end());
  s.inv_rms2.resize(n);
  rmsnorm_forward(x_.data(), W.ffn_norm.data(), xn_.data(), s.inv_rms2.data(), T, d, c.rms_eps);
  s.g.resize(n * ff);
  s.u.resize(n * ff);
  h_.resize(n * ff);
  gemm(false, true, T, ff, d, Real(1), xn_.data(), d, W.wg.data(), d, Real(0), s.g.data(), ff);
  gemm(false, true, T, ff, d, Real(1), xn_.data(), d, W.wu.data(), d, Real(0), s.u.data(), ff);
  swiglu_forward(s.g.data(), s.u.data(), h_.data(), (int64_t)n * ff);
  gemm(false, true, T, d, ff, Real(1), h_.data(), ff, W.wd.data(), ff, Real(0), tmp_.data(), d);
  for (size_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];
}

// Dense causal attention, one query head at a time: S = q_h k_g^T / sqrt(hd) [T, T] by sgemm (the
// masked upper triangle is computed and discarded: simpler than blocking, and attention is a small
// part of the pass at T <= 2048), softmax over j <= t, out_h = P v_g. lse [n_head, T].
template <typename Real>
void ActivationBackward<Real>::attention_forward(int T, const Real* q, const Real* k, const Real* v, Real* out,
                                                 Real* lse) {
  const ModelConfig& c = config_;
  const int qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const Real sc = (Real)(1.0 / std::sqrt((double)hd));
  scores_.resize((size_t)T * T);
  for (int h = 0; h < c.n_head; ++h) {
    const int g = h / c.group_size();
    gemm(false, true, T, T, hd, sc, q + h * hd, qd, k + g * hd, kvd, Real(0), scores_.data(), T);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t) {
      Real* row = scores_.data() + (size_t)t * T;
      Real m = row[0];
      for (int j = 1; j <= t; ++j) m = std::max(m, row[j]);
      double sum = 0;
      for (int j = 0; j <= t; ++j) sum += std::exp((double)(row[j] - m));
      const Real l = m + (Real)std::log(sum);
      lse[(size_t)h * T + t] = l;
      for (int j = 0; j <= t; ++j) row[j] = std::exp(row[j] - l);
      for (int j = t + 1; j < T; ++j) row[j] = 0;
    }
    gemm(false, false, T, hd, T, Real(1), scores_.data(), T, v + g * hd, kvd, Real(0), out + h * hd, qd);
  }
}

// Mean NLL of token[t+1] given the final normed stream xf_[t], t < T-1, in chunks of rows.
// With grad: dlogits = (softmax - onehot) / (T-1), dxf_ = dlogits W_out (row T-1 is zero).
template <typename Real>
double ActivationBackward<Real>::lm_head(const std::vector<int32_t>& tokens, bool grad) {
  const ModelConfig& c = config_;
  const int T = (int)tokens.size(), d = c.d_model, V = c.n_vocab, n_pred = T - 1;
  logits_.resize((size_t)kLmHeadRows * V);
  if (grad) dxf_.assign((size_t)T * d, Real(0));
  double total = 0;
  for (int r0 = 0; r0 < n_pred; r0 += kLmHeadRows) {
    const int rows = std::min(kLmHeadRows, n_pred - r0);
    gemm(false, true, rows, V, d, Real(1), xf_.data() + (size_t)r0 * d, d, output_.data(), d, Real(0), logits_.data(),
         V);
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int r = 0; r < rows; ++r) {
      Real* row = logits_.data() + (size_t)r * V;
      const int target = tokens[r0 + r + 1];
      Real m = row[0];
      for (int j = 1; j < V; ++j) m = std::max(m, row[j]);
      double sum = 0;
      for (int j = 0; j < V; ++j) sum += std::exp((double)(row[j] - m));
      const double lse = (double)m + std::log(sum);
      total += lse - (double)row[target];
      if (grad) {
        for (int j = 0; j < V; ++j) row[j] = (Real)(std::exp((double)row[j] - lse) / n_pred);
        row[target] -= (Real)(1.0 / n_pred);
      }
    }
    if (grad)
      gemm(false, false, rows, d, V, Real(1), logits_.data(), V, output_.data(), d, Real(0),
           dxf_.data() + (size_t)r0 * d, d);
  }
  return total / n_pred;
}

template <typename Real>
void ActivationBackward<Real>::run(const std::vector<int32_t>& tokens, double pos_scale, KvGradients<Real>& out,
                                   const QkvObserver<Real>& observer) {
  const ModelConfig& c = config_;
  out.loss = forward(tokens, pos_scale, nullptr, observer, true);
  const int T = (int)tokens.size();
  out.n_tokens = T;
  out.k.resize(c.n_layer);
  out.v.resize(c.n_layer);
  out.dk.resize(c.n_layer);
  out.dv.resize(c.n_layer);
  dx_.resize((size_t)T * c.d_model);
  rmsnorm_backward(x_.data(), output_norm_.data(), inv_rms_f_.data(), dxf_.data(), dx_.data(), T, c.d_model, false);
  for (int l = c.n_layer - 1; l >= 0; --l) layer_backward(l, T, out);
}

// dx_ holds dL/d(stream leaving layer l); on return, dL/d(stream entering it).
template <typename Real>
void ActivationBackward<Real>::layer_backward(int l, int T, KvGradients<Real>& out) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  Saved& s = saved_[l];
  const int d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, ff = c.d_ffn;
  const size_t n = T;

  // Feed-forward: x_out = x_mid + W_d (silu(W_g xn) * W_u xn), xn = rmsnorm(x_mid).
  h_.resize(n * ff);
  dg_.resize(n * ff);
  du_.resize(n * ff);
  dxn_.resize(n * d);
  gemm(false, false, T, ff, d, Real(1), dx_.data(), d, W.wd.data(), ff, Real(0), h_.data(), ff);  // dh
  swiglu_backward(s.g.data(), s.u.data(), h_.data(), dg_.data(), du_.data(), (int64_t)n * ff);
  gemm(false, false, T, d, ff, Real(1), dg_.data(), ff, W.wg.data(), d, Real(0), dxn_.data(), d);
  gemm(false, false, T, d, ff, Real(1), du_.data(), ff, W.wu.data(), d, Real(1), dxn_.data(), d);
  rmsnorm_backward(s.x_mid.data(), W.ffn_norm.data(), s.inv_rms2.data(), dxn_.data(), dx_.data(), T, d, true);

  // Attention: x_mid = x_in + W_o attn(q, k, v). dattn = dx W_o [T, qd].
  dattn_.resize(n * qd);
  gemm(false, false, T, qd, d, Real(1), dx_.data(), d, W.wo.data(), qd, Real(0), dattn_.data(), qd);
  dq_.assign(n * qd, Real(0));
  dk_.assign(n * kvd, Real(0));
  dv_.assign(n * kvd, Real(0));
  scores_.resize(n * n);
  dscores_.resize(n * n);
  const Real sc = (Real)(1.0 / std::sqrt((double)hd));
  for (int h = 0; h < c.n_head; ++h) {
    const int g = h / c.group_size();  // GQA: dk/dv of a KV head sum over its query heads
    const Real* qh = s.q.data() + h * hd;
    const Real* kg = s.k.data() + g * hd;
    const Real* vg = s.v.data() + g * hd;
    const Real* doh = dattn_.data() + h * hd;
    const Real* oh = s.attn.data() + h * hd;
    const Real* lse = s.lse.data() + (size_t)h * T;
    // P, recomputed from the saved log-sum-exp (cheaper in memory than keeping [n_head, T, T]).
    gemm(false, true, T, T, hd, sc, qh, qd, kg, kvd, Real(0), scores_.data(), T);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t) {
      Real* row = scores_.data() + (size_t)t * T;
      for (int j = 0; j <= t; ++j) row[j] = std::exp(row[j] - lse[t]);
      for (int j = t + 1; j < T; ++j) row[j] = 0;
    }
    // dV_g += P^T dO_h;  dP = dO_h V_g^T.
    gemm(true, false, T, hd, T, Real(1), scores_.data(), T, doh, qd, Real(1), dv_.data() + g * hd, kvd);
    gemm(false, true, T, T, hd, Real(1), doh, qd, vg, kvd, Real(0), dscores_.data(), T);
    // dS = P (dP - rowsum(dO . O)).
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t) {
      const Real* p = scores_.data() + (size_t)t * T;
      Real* ds = dscores_.data() + (size_t)t * T;
      Real D = 0;
      for (int j = 0; j < hd; ++j) D += doh[(size_t)t * qd + j] * oh[(size_t)t * qd + j];
      for (int j = 0; j <= t; ++j) ds[j] = p[j] * (ds[j] - D);
      for (int j = t + 1; j < T; ++j) ds[j] = 0;
    }
    // S = sc q k^T:  dq_h = sc dS k_g;  dk_g += sc dS^T q_h.
    gemm(false, false, T, hd, T, sc, dscores_.data(), T, kg, kvd, Real(0), dq_.data() + h * hd, qd);
    gemm(true, false, T, hd, T, sc, dscores_.data(), T, qh, qd, Real(1), dk_.data() + g * hd, kvd);
  }
  out.k[l] = s.k;
  out.v[l] = s.v;
  out.dk[l] = dk_;  // post-RoPE: the gradient wrt the cached key
  out.dv[l] = dv_;

  // Back through RoPE (rotation by -angle), the QK norm, the projections and the attention norm.
  rope_rotate(dq_.data(), pos_.data(), T, c.n_head, hd, c.rope_style, c.rope_base, -1);
  rope_rotate(dk_.data(), pos_.data(), T, c.n_head_kv, hd, c.rope_style, c.rope_base, -1);
  if (c.qk_norm) {
    rmsnorm_backward(s.q_pre.data(), W.q_norm.data(), s.rq.data(), dq_.data(), dq_.data(), T * c.n_head, hd, false);
    rmsnorm_backward(s.k_pre.data(), W.k_norm.data(), s.rk.data(), dk_.data(), dk_.data(), T * c.n_head_kv, hd,
                     false);
  }
  gemm(false, false, T, d, qd, Real(1), dq_.data(), qd, W.wq.data(), d, Real(0), dxn_.data(), d);
  gemm(false, false, T, d, kvd, Real(1), dk_.data(), kvd, W.wk.data(), d, Real(1), dxn_.data(), d);
  gemm(false, false, T, d, kvd, Real(1), dv_.data(), kvd, W.wv.data(), d, Real(1), dxn_.data(), d);
  rmsnorm_backward(s.x_in.data(), W.attn_norm.data(), s.inv_rms1.data(), dxn_.data(), dx_.data(), T, d, true);
}

template class ActivationBackward<float>;
template class ActivationBackward<double>;

}  // namespace mpkv::calib

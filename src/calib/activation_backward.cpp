#include "calib/activation_backward.h"

#include <omp.h>

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
constexpr int kLmHeadRows = 64;
// Queries per attention task: blocks skip the keys after the block (causal) and give 2 threads
// enough tasks to balance (T = 512, 9 heads: 36 tasks).
constexpr int kAttnBlock = 128;

// The keys query t sees, as columns [lo, hi] of a block whose first column is key k0.
struct KeySpan {
  int lo, hi;
};
KeySpan key_span(int window, int t, int k0) { return {window_start(window, t) - k0, t - k0}; }

template <typename Real>
void zero_outside(Real* row, KeySpan ks, int nk) {
  std::fill(row, row + ks.lo, Real(0));
  std::fill(row + ks.hi + 1, row + nk, Real(0));
}

// -log softmax(z)[target] of one row of logits z (n values), z = cap tanh(y / cap) when cap > 0 (y
// the row as given). With grad the row becomes dL/dy for L = that NLL / n_pred:
// (softmax(z) - onehot) / n_pred, times dz/dy = 1 - (z / cap)^2 under the cap.
template <typename Real>
double softmax_nll_row(Real* row, int n, int target, double cap, int n_pred, bool grad) {
  if (cap > 0)
    for (int j = 0; j < n; ++j) row[j] = (Real)(cap * std::tanh(row[j] / cap));
  Real m = row[0];
  for (int j = 1; j < n; ++j) m = std::max(m, row[j]);
  const double nll_shift = (double)m - (double)row[target];
  double sum = 0;
  if (!grad) {
    for (int j = 0; j < n; ++j) sum += std::exp(row[j] - m);  // Real exp, double sum
    return nll_shift + std::log(sum);
  }
  if (cap <= 0) {
    for (int j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - m));
    const Real scale = (Real)(1.0 / (sum * n_pred));
    for (int j = 0; j < n; ++j) row[j] *= scale;
    row[target] -= (Real)(1.0 / n_pred);
    return nll_shift + std::log(sum);
  }
  for (int j = 0; j < n; ++j) sum += std::exp(row[j] - m);
  const Real scale = (Real)(1.0 / (sum * n_pred)), inv_cap = (Real)(1.0 / cap);
  for (int j = 0; j < n; ++j) {
    const Real z = row[j], dz = std::exp(z - m) * scale - (j == target ? (Real)(1.0 / n_pred) : Real(0));
    row[j] = dz * (Real(1) - (z * inv_cap) * (z * inv_cap));
  }
  return nll_shift + std::log(sum);
}

}  // namespace

template <typename Real>
ActivationBackward<Real>::ActivationBackward(const Model& model) : model_(model), config_(model.config()) {
  const ModelConfig& c = config_;
  MPKV_CHECK(c.rope_dim == 0 || c.rope_dim == c.head_dim,
             "calibration backward: partial RoPE (rope_dim " + std::to_string(c.rope_dim) + " < head_dim " +
                 std::to_string(c.head_dim) + ") is not supported");
  MPKV_ASSERT((int)c.layer_attn.size() == c.n_layer, "calibration backward: no per-layer attention");
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
    if (c.post_norms) {
      D.attn_post_norm = dense_vector<Real>(L.attn_post_norm);
      D.ffn_post_norm = dense_vector<Real>(L.ffn_post_norm);
      MPKV_CHECK((int)D.attn_post_norm.size() == c.d_model && (int)D.ffn_post_norm.size() == c.d_model,
                 "calibration backward: layer " + std::to_string(l) + " lacks its post-attention / post-FFN norms");
    }
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
  BlasSingleThread blas_guard;
  return forward(tokens, pos_scale, perturb, observer, false, false);
}

template <typename Real>
void ActivationBackward<Real>::observe(const std::vector<int32_t>& tokens, double pos_scale,
                                       const QkvObserver<Real>& observer) {
  BlasSingleThread blas_guard;
  forward(tokens, pos_scale, nullptr, observer, false, true);
}

template <typename Real>
double ActivationBackward<Real>::forward(const std::vector<int32_t>& tokens, double pos_scale,
                                         const KvPerturbation* perturb, const QkvObserver<Real>& observer,
                                         bool keep, bool observe_only) {
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
  pos_scale_ = pos_scale;
  x_.resize(T * d);
  std::vector<float> row(d);
  const WeightMatrix& E = model_.weights().token_embd;
  for (int t = 0; t < T; ++t) {
    dequantize_row(E.type, E.data + (size_t)tokens[t] * E.row_bytes, row.data(), c.d_model);
    // gemma3 scales the embeddings (in float, as the engine does); no gradient goes back to them.
    if (c.embd_scale != 1.0f)
      for (float& e : row) e *= c.embd_scale;
    std::copy(row.begin(), row.end(), x_.begin() + t * d);
  }
  saved_.resize(keep ? c.n_layer : 1);
  for (int l = 0; l < c.n_layer; ++l)
    layer_forward(l, T, perturb, observer, saved_[keep ? l : 0], keep, observe_only && l == c.n_layer - 1);
  if (observe_only) return 0.0;

  xf_.resize(T * d);
  inv_rms_f_.resize(T);
  rmsnorm_forward(x_.data(), output_norm_.data(), xf_.data(), inv_rms_f_.data(), T, c.d_model, c.rms_eps);
  return lm_head(tokens, keep);
}

template <typename Real>
void ActivationBackward<Real>::layer_positions(int l, int T) {
  pos_.resize(T);
  for (int t = 0; t < T; ++t) pos_[t] = (double)t * pos_scale_;
}

template <typename Real>
void ActivationBackward<Real>::layer_forward(int l, int T, const KvPerturbation* perturb,
                                             const QkvObserver<Real>& observer, Saved& s, bool keep,
                                             bool qkv_only) {
  if (keep) s.x_in.assign(x_.begin(), x_.end());
  qkv_forward(l, T, s, keep);
  if (perturb && perturb->layer == l) (perturb->role == KvRole::key ? s.k : s.v)[perturb->index] += (Real)perturb->delta;
  if (observer) observer(l, T, s.q.data(), s.k.data(), s.v.data());
  if (qkv_only) return;
  attention_block_forward(l, T, s, keep);
  ffn_forward(l, T, s, keep);
}

// As Forward::attention_block up to the cache: q, k, v = W xn (+ bias), QK norm, RoPE, then q
// times the query scale.
template <typename Real>
void ActivationBackward<Real>::qkv_forward(int l, int T, Saved& s, bool keep) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  const int d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const size_t n = T;
  xn_.resize(n * d);
  s.inv_rms1.resize(n);
  rmsnorm_forward(x_.data(), W.attn_norm.data(), xn_.data(), s.inv_rms1.data(), T, d, c.rms_eps);
  s.q.resize(n * qd);
  s.k.resize(n * kvd);
  s.v.resize(n * kvd);
  gemm_rows_parallel(true, T, qd, d, Real(1), xn_.data(), d, W.wq.data(), d, Real(0), s.q.data(), qd);
  gemm_rows_parallel(true, T, kvd, d, Real(1), xn_.data(), d, W.wk.data(), d, Real(0), s.k.data(), kvd);
  gemm_rows_parallel(true, T, kvd, d, Real(1), xn_.data(), d, W.wv.data(), d, Real(0), s.v.data(), kvd);
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
  layer_positions(l, T);
  const RopePairTable rope = rope_pair_table(layer_rope(c, l, model_.weights().rope_freqs.data), hd);
  rope_rotate(s.q.data(), pos_.data(), T, c.n_head, hd, c.rope_style, rope, +1);
  rope_rotate(s.k.data(), pos_.data(), T, c.n_head_kv, hd, c.rope_style, rope, +1);
  if (c.query_scale != 1.0f)
    for (Real& x : s.q) x *= (Real)c.query_scale;
}

// x += post(W_o attn(q, k, v)), post = the post-attention norm (gemma3) or nothing.
template <typename Real>
void ActivationBackward<Real>::attention_block_forward(int l, int T, Saved& s, bool keep) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  const int d = c.d_model, qd = c.q_dim();
  const size_t n = T;
  s.attn.resize(n * qd);
  s.lse.resize(n * c.n_head);
  attention_forward(l, T, s.q.data(), s.k.data(), s.v.data(), s.attn.data(), s.lse.data());
  tmp_.resize(n * d);
  gemm_rows_parallel(true, T, d, qd, Real(1), s.attn.data(), qd, W.wo.data(), qd, Real(0), tmp_.data(), d);
  if (c.post_norms) {
    if (keep) s.attn_proj = tmp_;
    s.inv_rms_pa.resize(n);
    rmsnorm_forward(tmp_.data(), W.attn_post_norm.data(), tmp_.data(), s.inv_rms_pa.data(), T, d, c.rms_eps);
  }
  for (size_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];
}

// x += post(W_d (act(W_g xn) * W_u xn)), xn = rmsnorm(x), post = the post-FFN norm (gemma3) or nothing.
template <typename Real>
void ActivationBackward<Real>::ffn_forward(int l, int T, Saved& s, bool keep) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  const int d = c.d_model, ff = c.d_ffn;
  const size_t n = T;
  if (keep) s.x_mid.assign(x_.begin(), x_.end());
  s.inv_rms2.resize(n);
  rmsnorm_forward(x_.data(), W.ffn_norm.data(), xn_.data(), s.inv_rms2.data(), T, d, c.rms_eps);
  s.g.resize(n * ff);
  s.u.resize(n * ff);
  h_.resize(n * ff);
  gemm_rows_parallel(true, T, ff, d, Real(1), xn_.data(), d, W.wg.data(), d, Real(0), s.g.data(), ff);
  gemm_rows_parallel(true, T, ff, d, Real(1), xn_.data(), d, W.wu.data(), d, Real(0), s.u.data(), ff);
  gated_forward(c.ffn_act, s.g.data(), s.u.data(), h_.data(), (int64_t)n * ff);
  gemm_rows_parallel(true, T, d, ff, Real(1), h_.data(), ff, W.wd.data(), ff, Real(0), tmp_.data(), d);
  if (c.post_norms) {
    if (keep) s.ffn_proj = tmp_;
    s.inv_rms_pf.resize(n);
    rmsnorm_forward(tmp_.data(), W.ffn_post_norm.data(), tmp_.data(), s.inv_rms_pf.data(), T, d, c.rms_eps);
  }
  for (size_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];
}

// Dense causal attention in tasks of (query head h, block of kAttnBlock queries [r0, r1)), spread
// over OpenMP threads: S = q_h[r0:r1] k_g[k0:r1]^T / sqrt(hd) by a single-threaded gemm (keys past
// r1 are never computed; k0 = the first key the block's first query sees: 0, or r0 - W + 1 in a
// sliding-window layer), each row masked to the keys its query sees (key_span), softmax over them,
// out_h[r0:r1] = P v_g[k0:r1]. lse [n_head, T] keeps each row's log-sum-exp for the backward.
template <typename Real>
void ActivationBackward<Real>::attention_forward(int l, int T, const Real* q, const Real* k, const Real* v, Real* out,
                                                 Real* lse) {
  const ModelConfig& c = config_;
  const int qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, W = c.attn(l).window;
  const Real sc = (Real)(1.0 / std::sqrt((double)hd));
  const int n_blocks = (T + kAttnBlock - 1) / kAttnBlock, n_tasks = n_blocks * c.n_head;
  thread_scratch_.resize(omp_get_max_threads());
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < n_tasks; ++task) {
    const int b = n_blocks - 1 - task / c.n_head, h = task % c.n_head;  // largest blocks first
    const int g = h / c.group_size();
    const int r0 = b * kAttnBlock, r1 = std::min(T, r0 + kAttnBlock), nr = r1 - r0;
    const int k0 = window_start(W, r0), nk = r1 - k0;
    ThreadScratch& ts = thread_scratch_[omp_get_thread_num()];
    ts.p.resize((size_t)kAttnBlock * T);
    Real* P = ts.p.data();  // [nr, nk], column j = key k0 + j
    gemm(false, true, nr, nk, hd, sc, q + (size_t)r0 * qd + h * hd, qd, k + (size_t)k0 * kvd + g * hd, kvd, Real(0),
         P, nk);
    for (int i = 0; i < nr; ++i) {
      const int t = r0 + i;
      const KeySpan ks = key_span(W, t, k0);
      Real* row = P + (size_t)i * nk;
      Real m = row[ks.lo];
      for (int j = ks.lo + 1; j <= ks.hi; ++j) m = std::max(m, row[j]);
      double sum = 0;
      for (int j = ks.lo; j <= ks.hi; ++j) sum += (row[j] = std::exp(row[j] - m));
      lse[(size_t)h * T + t] = m + (Real)std::log(sum);
      const Real inv = (Real)(1.0 / sum);
      for (int j = ks.lo; j <= ks.hi; ++j) row[j] *= inv;
      zero_outside(row, ks, nk);
    }
    gemm(false, false, nr, hd, nk, Real(1), P, nk, v + (size_t)k0 * kvd + g * hd, kvd, Real(0),
         out + (size_t)r0 * qd + h * hd, qd);
  }
}

// Mean NLL of token[t+1] given the final normed stream xf_[t], t < T-1, in chunks of kLmHeadRows
// rows spread over OpenMP threads (logits softcapped when the model says so). With grad: dlogits
// from softmax_nll_row and dxf_ = dlogits W_out (row T-1 stays zero).
template <typename Real>
double ActivationBackward<Real>::lm_head(const std::vector<int32_t>& tokens, bool grad) {
  const ModelConfig& c = config_;
  const int T = (int)tokens.size(), d = c.d_model, V = c.n_vocab, n_pred = T - 1;
  if (grad) dxf_.assign((size_t)T * d, Real(0));
  thread_scratch_.resize(omp_get_max_threads());
  const int n_chunks = (n_pred + kLmHeadRows - 1) / kLmHeadRows;
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(dynamic, 1)
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const int r0 = chunk * kLmHeadRows, rows = std::min(kLmHeadRows, n_pred - r0);
    ThreadScratch& ts = thread_scratch_[omp_get_thread_num()];
    ts.logits.resize((size_t)kLmHeadRows * V);
    Real* logits = ts.logits.data();
    gemm(false, true, rows, V, d, Real(1), xf_.data() + (size_t)r0 * d, d, output_.data(), d, Real(0), logits, V);
    for (int r = 0; r < rows; ++r)
      total += softmax_nll_row(logits + (size_t)r * V, V, tokens[r0 + r + 1], c.final_softcap, n_pred, grad);
    if (grad)
      gemm(false, false, rows, d, V, Real(1), logits, V, output_.data(), d, Real(0), dxf_.data() + (size_t)r0 * d, d);
  }
  return total / n_pred;
}

template <typename Real>
void ActivationBackward<Real>::run(const std::vector<int32_t>& tokens, double pos_scale, KvGradients<Real>& out,
                                   const QkvObserver<Real>& observer) {
  const ModelConfig& c = config_;
  BlasSingleThread blas_guard;
  out.loss = forward(tokens, pos_scale, nullptr, observer, true, false);
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

// The pairs outside [k0, k1) of each query row are zeroed in a copy of P (for dV) and of dS (for
// dK); the columns span the union of the rows' ranges, [min k0, max k1). Column j of P and dS is
// key key0 + j (a sliding-window block starts at its first visible key).
template <typename Real>
void ActivationBackward<Real>::quantized_pair_grads(int l, int r0, int nr, int g, const Real* P, const Real* dS,
                                                    int key0, int nk, const Real* qh, const Real* doh, Real sc,
                                                    ThreadScratch& ts) const {
  const ModelConfig& c = config_;
  const int qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  std::vector<int> k0(nr), k1(nr);
  int lo = nk, hi = 0;
  for (int i = 0; i < nr; ++i) {
    quantized_pairs_(l, r0 + i, k0[i], k1[i]);  // absolute key positions -> columns
    k0[i] = std::max(k0[i] - key0, 0);
    k1[i] = std::min(k1[i] - key0, nk);
    if (k0[i] < k1[i]) lo = std::min(lo, k0[i]), hi = std::max(hi, k1[i]);
  }
  if (lo >= hi) return;
  const int w = hi - lo;
  ts.pm.resize((size_t)nr * w);
  for (int pass = 0; pass < 2; ++pass) {  // 0: P -> dV_q, 1: dS -> dK_q
    const Real* src = pass == 0 ? P : dS;
    for (int i = 0; i < nr; ++i)
      for (int j = lo; j < hi; ++j)
        ts.pm[(size_t)i * w + (j - lo)] = j >= k0[i] && j < k1[i] ? src[(size_t)i * nk + j] : Real(0);
    if (pass == 0)
      gemm(true, false, w, hd, nr, Real(1), ts.pm.data(), w, doh, qd, Real(1), ts.dv_q.data() + (size_t)(key0 + lo) * kvd + g * hd, kvd);
    else
      gemm(true, false, w, hd, nr, sc, ts.pm.data(), w, qh, qd, Real(1), ts.dk_q.data() + (size_t)(key0 + lo) * kvd + g * hd, kvd);
  }
}

// dx_ holds dL/d(stream leaving layer l); on return, dL/d(stream entering it). The steps undo
// layer_forward's in reverse: the FFN, the attention output, attention itself (dQ and the dK / dV
// that out receives), then the q / k / v projections.
template <typename Real>
void ActivationBackward<Real>::layer_backward(int l, int T, KvGradients<Real>& out) {
  ffn_backward(l, T);
  attention_backward(l, T);
  collect_kv_gradients(l, T, out);
  qkv_backward(l, T);
}

// Feed-forward: x_out = x_mid + post(W_d (act(W_g xn) * W_u xn)), xn = rmsnorm(x_mid). dx_ becomes
// dL/dx_mid.
template <typename Real>
void ActivationBackward<Real>::ffn_backward(int l, int T) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  const Saved& s = saved_[l];
  const int d = c.d_model, ff = c.d_ffn;
  const size_t n = T;
  h_.resize(n * ff);
  dg_.resize(n * ff);
  du_.resize(n * ff);
  dxn_.resize(n * d);
  const Real* dffn = post_norm_backward(s.ffn_proj, W.ffn_post_norm, s.inv_rms_pf, dx_.data(), T);
  gemm_rows_parallel(false, T, ff, d, Real(1), dffn, d, W.wd.data(), ff, Real(0), h_.data(), ff);  // dh
  gated_backward(c.ffn_act, s.g.data(), s.u.data(), h_.data(), dg_.data(), du_.data(), (int64_t)n * ff);
  gemm_rows_parallel(false, T, d, ff, Real(1), dg_.data(), ff, W.wg.data(), d, Real(0), dxn_.data(), d);
  gemm_rows_parallel(false, T, d, ff, Real(1), du_.data(), ff, W.wu.data(), d, Real(1), dxn_.data(), d);
  rmsnorm_backward(s.x_mid.data(), W.ffn_norm.data(), s.inv_rms2.data(), dxn_.data(), dx_.data(), T, d, true);
}

// Attention: x_mid = x_in + post(W_o attn(q, k, v)). dattn_ = dproj W_o [T, qd], then tasks of
// (head, query block) as in the forward fill dq_ (w.r.t. the scaled post-RoPE q); each thread sums
// its dK/dV contributions in its own [T, kv_dim] arrays (GQA: the query heads of a group add into
// one KV head; blocks of one head add into earlier keys), reduced by collect_kv_gradients.
template <typename Real>
void ActivationBackward<Real>::attention_backward(int l, int T) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  const Saved& s = saved_[l];
  const int d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim();
  const size_t n = T;
  dattn_.resize(n * qd);
  const Real* dproj = post_norm_backward(s.attn_proj, W.attn_post_norm, s.inv_rms_pa, dx_.data(), T);
  gemm_rows_parallel(false, T, qd, d, Real(1), dproj, d, W.wo.data(), qd, Real(0), dattn_.data(), qd);
  dq_.resize(n * qd);
  thread_scratch_.resize(omp_get_max_threads());
  for (auto& ts : thread_scratch_) ts.dk.assign(n * kvd, Real(0)), ts.dv.assign(n * kvd, Real(0));
  if (quantized_pairs_)
    for (auto& ts : thread_scratch_) ts.dk_q.assign(n * kvd, Real(0)), ts.dv_q.assign(n * kvd, Real(0));
  const int n_blocks = (T + kAttnBlock - 1) / kAttnBlock, n_tasks = n_blocks * c.n_head;
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < n_tasks; ++task) {
    const int b = n_blocks - 1 - task / c.n_head, h = task % c.n_head;
    attention_task_backward(l, T, h, b * kAttnBlock, std::min(T, b * kAttnBlock + kAttnBlock),
                            thread_scratch_[omp_get_thread_num()]);
  }
}

// One (head h, queries [r0, r1)) task of attention_backward.
template <typename Real>
void ActivationBackward<Real>::attention_task_backward(int l, int T, int h, int r0, int r1, ThreadScratch& ts) {
  const ModelConfig& c = config_;
  const Saved& s = saved_[l];
  const int qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, W_l = c.attn(l).window;
  const Real sc = (Real)(1.0 / std::sqrt((double)hd));
  const int g = h / c.group_size(), nr = r1 - r0;
  const int k0 = window_start(W_l, r0), nk = r1 - k0;  // keys [k0, r1), as in the forward
  ts.p.resize((size_t)kAttnBlock * T);
  ts.dp.resize((size_t)kAttnBlock * T);
  Real* P = ts.p.data();    // [nr, nk], column j = key k0 + j
  Real* dS = ts.dp.data();  // [nr, nk]
  const Real* qh = s.q.data() + (size_t)r0 * qd + h * hd;       // [nr, hd], stride qd
  const Real* doh = dattn_.data() + (size_t)r0 * qd + h * hd;   // [nr, hd], stride qd
  const Real* oh = s.attn.data() + (size_t)r0 * qd + h * hd;
  const Real* kg = s.k.data() + (size_t)k0 * kvd + g * hd;      // [nk, hd], stride kvd
  const Real* vg = s.v.data() + (size_t)k0 * kvd + g * hd;
  const Real* lse = s.lse.data() + (size_t)h * T;
  // P, recomputed from the saved log-sum-exp (cheaper in memory than keeping [n_head, T, T]).
  gemm(false, true, nr, nk, hd, sc, qh, qd, kg, kvd, Real(0), P, nk);
  for (int i = 0; i < nr; ++i) {
    const int t = r0 + i;
    const KeySpan ks = key_span(W_l, t, k0);
    Real* row = P + (size_t)i * nk;
    for (int j = ks.lo; j <= ks.hi; ++j) row[j] = std::exp(row[j] - lse[t]);
    zero_outside(row, ks, nk);
  }
  // dV_g += P^T dO_h;  dP = dO_h V_g^T;  dS = P (dP - rowsum(dO . O)).
  gemm(true, false, nk, hd, nr, Real(1), P, nk, doh, qd, Real(1), ts.dv.data() + (size_t)k0 * kvd + g * hd, kvd);
  gemm(false, true, nr, nk, hd, Real(1), doh, qd, vg, kvd, Real(0), dS, nk);
  for (int i = 0; i < nr; ++i) {
    const KeySpan ks = key_span(W_l, r0 + i, k0);
    const Real* p = P + (size_t)i * nk;
    Real* ds = dS + (size_t)i * nk;
    Real D = 0;
    for (int j = 0; j < hd; ++j) D += doh[(size_t)i * qd + j] * oh[(size_t)i * qd + j];
    for (int j = ks.lo; j <= ks.hi; ++j) ds[j] = p[j] * (ds[j] - D);
    zero_outside(ds, ks, nk);
  }
  // S = sc q k^T:  dq_h = sc dS k_g (rows of this block only);  dk_g += sc dS^T q_h.
  gemm(false, false, nr, hd, nk, sc, dS, nk, kg, kvd, Real(0), dq_.data() + (size_t)r0 * qd + h * hd, qd);
  gemm(true, false, nk, hd, nr, sc, dS, nk, qh, qd, Real(1), ts.dk.data() + (size_t)k0 * kvd + g * hd, kvd);
  if (quantized_pairs_) quantized_pair_grads(l, r0, nr, g, P, dS, k0, nk, qh, doh, sc, ts);
}

// Sums the threads' dK / dV into dk_, dv_ and out (post-RoPE: the gradients w.r.t. the cached K/V);
// with quantized pairs also out.dk_q / dv_q.
template <typename Real>
void ActivationBackward<Real>::collect_kv_gradients(int l, int T, KvGradients<Real>& out) {
  const ModelConfig& c = config_;
  const size_t n = T, kvd = c.kv_dim();
  dk_.assign(n * kvd, Real(0));
  dv_.assign(n * kvd, Real(0));
  for (const auto& ts : thread_scratch_) {
    for (size_t i = 0; i < n * kvd; ++i) dk_[i] += ts.dk[i], dv_[i] += ts.dv[i];
  }
  out.k[l] = saved_[l].k;
  out.v[l] = saved_[l].v;
  out.dk[l] = dk_;
  out.dv[l] = dv_;
  if (quantized_pairs_) {
    out.dk_q.resize(c.n_layer);
    out.dv_q.resize(c.n_layer);
    out.dk_q[l].assign(n * kvd, Real(0));
    out.dv_q[l].assign(n * kvd, Real(0));
    for (const auto& ts : thread_scratch_)
      for (size_t i = 0; i < n * kvd; ++i) out.dk_q[l][i] += ts.dk_q[i], out.dv_q[l][i] += ts.dv_q[i];
  } else {
    out.dk_q.clear();
    out.dv_q.clear();
  }
}

// Back through qkv_forward: the query scale, RoPE (rotation by -angle), the QK norm, the
// projections and the attention norm; dx_ gains dL/dx_in through q, k and v.
template <typename Real>
void ActivationBackward<Real>::qkv_backward(int l, int T) {
  const ModelConfig& c = config_;
  const DenseLayer& W = layers_[l];
  const Saved& s = saved_[l];
  const int d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  if (c.query_scale != 1.0f)
    for (Real& x : dq_) x *= (Real)c.query_scale;
  layer_positions(l, T);
  const RopePairTable rope = rope_pair_table(layer_rope(c, l, model_.weights().rope_freqs.data), hd);
  rope_rotate(dq_.data(), pos_.data(), T, c.n_head, hd, c.rope_style, rope, -1);
  rope_rotate(dk_.data(), pos_.data(), T, c.n_head_kv, hd, c.rope_style, rope, -1);
  if (c.qk_norm) {
    rmsnorm_backward(s.q_pre.data(), W.q_norm.data(), s.rq.data(), dq_.data(), dq_.data(), T * c.n_head, hd, false);
    rmsnorm_backward(s.k_pre.data(), W.k_norm.data(), s.rk.data(), dk_.data(), dk_.data(), T * c.n_head_kv, hd,
                     false);
  }
  gemm_rows_parallel(false, T, d, qd, Real(1), dq_.data(), qd, W.wq.data(), d, Real(0), dxn_.data(), d);
  gemm_rows_parallel(false, T, d, kvd, Real(1), dk_.data(), kvd, W.wk.data(), d, Real(1), dxn_.data(), d);
  gemm_rows_parallel(false, T, d, kvd, Real(1), dv_.data(), kvd, W.wv.data(), d, Real(1), dxn_.data(), d);
  rmsnorm_backward(s.x_in.data(), W.attn_norm.data(), s.inv_rms1.data(), dxn_.data(), dx_.data(), T, d, true);
}

template <typename Real>
const Real* ActivationBackward<Real>::post_norm_backward(const std::vector<Real>& proj, const std::vector<Real>& w,
                                                         const std::vector<Real>& inv_rms, const Real* dy, int T) {
  if (!config_.post_norms) return dy;
  dproj_.resize((size_t)T * config_.d_model);
  rmsnorm_backward(proj.data(), w.data(), inv_rms.data(), dy, dproj_.data(), T, config_.d_model, false);
  return dproj_.data();
}

template class ActivationBackward<float>;
template class ActivationBackward<double>;

}  // namespace mpkv::calib

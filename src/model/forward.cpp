#include "model/forward.h"

#include <omp.h>

#include <cmath>
#include <thread>

#include "gguf/dequant.h"
#include "model/linear.h"
#include "model/ops.h"
#include "util/error.h"


namespace mpkv {

void set_num_threads(int n) {
  if (n <= 0) n = default_num_threads();
  omp_set_num_threads(n);
}

int default_num_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return hc ? (int)hc : 1;
}

Forward::Forward(const Model& model) : model_(model) {}

void Forward::set_qk_smoothing(std::vector<std::vector<float>> lambda) {
  const ModelConfig& c = model_.config();
  MPKV_CHECK(lambda.empty() || (int)lambda.size() == c.n_layer,
             "key smoothing has " + std::to_string(lambda.size()) + " layers, the model " + std::to_string(c.n_layer));
  for (const auto& l : lambda) {
    MPKV_CHECK(l.empty() || (int)l.size() == c.kv_dim(), "key smoothing has " + std::to_string(l.size()) +
                                                             " scales for a layer, expected n_head_kv * head_dim = " +
                                                             std::to_string(c.kv_dim()));
    for (float x : l) MPKV_CHECK(std::isfinite(x) && x > 0.0f, "key smoothing scales must be finite and positive");
  }
  qk_lambda_ = std::move(lambda);
}

void Forward::run(KvCache& cache, const std::vector<BatchToken>& batch, std::vector<float>& logits_out) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const int n = (int)batch.size();
  MPKV_ASSERT(n > 0, "forward: empty batch");
  for (int i = 0; i < n; ++i) {
    MPKV_CHECK(batch[i].token >= 0 && batch[i].token < c.n_vocab,
               "token id " + std::to_string(batch[i].token) + " is outside the vocabulary (" + std::to_string(c.n_vocab) + ")");
    if (i > 0 && batch[i].seq == batch[i - 1].seq) {
      MPKV_ASSERT(batch[i].pos == batch[i - 1].pos + 1, "forward: positions of a sequence must be consecutive");
    }
  }
  const size_t d = c.d_model;
  x_.resize(n * d);
  xn_.resize(n * d);
  q_.resize((size_t)n * c.q_dim());
  k_.resize((size_t)n * c.kv_dim());
  v_.resize((size_t)n * c.kv_dim());
  attn_.resize((size_t)n * c.q_dim());
  tmp_.resize(n * d);
  gate_.resize((size_t)n * c.d_ffn);
  up_.resize((size_t)n * c.d_ffn);
  pos_.resize(n);
  for (int i = 0; i < n; ++i) {
    pos_[i] = batch[i].pos;
    dequantize_row(w.token_embd.type, w.token_embd.data + (size_t)batch[i].token * w.token_embd.row_bytes,
                   x_.data() + i * d, c.d_model);
  }
  if (c.embd_scale != 1.0f) scale_inplace(x_.data(), (int64_t)n * d, c.embd_scale);
  for (int l = 0; l < c.n_layer; ++l) {
    attention_block(cache, batch, l);
    ffn_block(l, n);
  }

  // Final norm and output projection for the rows that want logits.
  std::vector<int> rows;
  for (int i = 0; i < n; ++i)
    if (batch[i].logits) rows.push_back(i);
  logits_out.resize(rows.size() * (size_t)c.n_vocab);
  if (rows.empty()) return;
  for (size_t r = 0; r < rows.size(); ++r)
    rmsnorm_forward(x_.data() + rows[r] * d, w.output_norm.data, xn_.data() + r * d, 1, c.d_model, c.rms_eps);
  linear_forward(w.output, xn_.data(), logits_out.data(), (int)rows.size());
  if (c.final_softcap > 0) softcap_forward(logits_out.data(), (int64_t)logits_out.size(), c.final_softcap);
}

void Forward::apply_qk_smoothing(int l, int n) {
  const ModelConfig& c = model_.config();
  const float* lam = qk_lambda_[l].data();
  const int hd = c.head_dim, group = c.group_size();
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < c.n_head; ++h)
      for (int j = 0; j < hd; ++j) q_[((size_t)i * c.n_head + h) * hd + j] *= lam[(h / group) * hd + j];
    for (int j = 0; j < c.kv_dim(); ++j) k_[(size_t)i * c.kv_dim() + j] /= lam[j];
  }
}

void Forward::append_and_attend(KvCache& cache, const std::vector<BatchToken>& batch, int l) {
  const ModelConfig& c = model_.config();
  const int n = (int)batch.size();
  spans_.clear();
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && batch[j].seq == batch[i].seq) ++j;
    const int seq = batch[i].seq;
    MPKV_ASSERT(cache.length(seq, l) == batch[i].pos,
                "forward: sequence " + std::to_string(seq) + " is at position " + std::to_string(cache.length(seq, l)) +
                    " in the KV cache but the batch continues it at " + std::to_string(batch[i].pos));
    cache.append(seq, l, j - i, k_.data() + (size_t)i * c.kv_dim(), v_.data() + (size_t)i * c.kv_dim());
    spans_.push_back({seq, i, j - i});
    i = j;
  }
  cache.attend_batch(l, spans_, q_.data(), attn_.data());
}

void Forward::attention_block(KvCache& cache, const std::vector<BatchToken>& batch, int l) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[l];
  const int n = (int)batch.size();
  rmsnorm_forward(x_.data(), L.attn_norm.data, xn_.data(), n, c.d_model, c.rms_eps);
  linear_forward_shared({{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xn_.data(), n);
  if (c.qkv_bias) {
    add_bias(q_.data(), L.bq.data, n, c.q_dim());
    add_bias(k_.data(), L.bk.data, n, c.kv_dim());
    add_bias(v_.data(), L.bv.data, n, c.kv_dim());
  }
  if (c.qk_norm) {
    rmsnorm_forward(q_.data(), L.q_norm.data, q_.data(), n * c.n_head, c.head_dim, c.rms_eps);
    rmsnorm_forward(k_.data(), L.k_norm.data, k_.data(), n * c.n_head_kv, c.head_dim, c.rms_eps);
  }
  if (!qk_lambda_.empty() && !qk_lambda_[l].empty()) apply_qk_smoothing(l, n);
  const RopeParams rope = layer_rope(c, l, model_.weights().rope_freqs.data);
  rope_forward_qk(q_.data(), c.n_head, k_.data(), c.n_head_kv, pos_.data(), n, c.head_dim, rope, pos_scale_);
  if (c.query_scale != 1.0f) scale_inplace(q_.data(), (int64_t)n * c.q_dim(), c.query_scale);
  if (observer_) observer_(l, n, k_.data(), v_.data());
  append_and_attend(cache, batch, l);
  linear_forward(L.wo, attn_.data(), tmp_.data(), n);
  if (c.post_norms) rmsnorm_forward(tmp_.data(), L.attn_post_norm.data, tmp_.data(), n, c.d_model, c.rms_eps);
  add_inplace(x_.data(), tmp_.data(), (int64_t)n * c.d_model);
}

void Forward::ffn_block(int l, int n) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[l];
  rmsnorm_forward(x_.data(), L.ffn_norm.data, xn_.data(), n, c.d_model, c.rms_eps);
  linear_forward_shared({{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, xn_.data(), n);
  gated_activation_forward(c.ffn_act, gate_.data(), up_.data(), (int64_t)n * c.d_ffn);
  linear_forward(L.w_down, gate_.data(), tmp_.data(), n);
  if (c.post_norms) rmsnorm_forward(tmp_.data(), L.ffn_post_norm.data, tmp_.data(), n, c.d_model, c.rms_eps);
  add_inplace(x_.data(), tmp_.data(), (int64_t)n * c.d_model);
}

}  // namespace mpkv

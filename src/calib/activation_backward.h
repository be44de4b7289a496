// Activation gradients of the language-model loss with respect to the cached keys and values
// (docs/algorithms.md §4, §6): a training-style forward over ONE sequence of T tokens (teacher forced,
// dense causal attention) that keeps the activations its backward needs, then the backward through
// the LM head, the final norm and each layer in reverse. No weight gradients.
//
// Blocks: llama / qwen2 / qwen3 (SwiGLU, optional q/k/v biases and QK-norm) and gemma3 as the
// engine's forward runs it (docs/gemma3.md): embeddings x sqrt(d) (no gradient flows into them),
// GeGLU with tanh GELU, RMSNorms after attention and after the FFN (weights as stored: the GGUF
// holds 1 + w), QK-norm, the final logit softcap, the RoPE frequency factors (rope_freqs.weight), and
// per layer its RoPE base / scaling and its sliding window (a query at t sees keys
// [max(0, t - W + 1), t], so a key gets gradient only from the W queries that see it), and its
// query scale (gemma3 27B: q is multiplied by it after RoPE, as Forward does, and dq by it on the
// way back). Not supported: partial RoPE.
//
// The forward sweep follows model/forward.cpp step for step (qkv_forward / attention_block_forward /
// ffn_forward mirror Forward::attention_block / ffn_block) in Real, without the engine's 8-bit
// activations and fp16 cache; test_activation_backward checks the K, V it recomputes against the
// engine's for every architecture and a query scale != 1.
//
//   loss L = mean over t in [0, T-1) of -log p(token[t+1] | tokens[0..t])
//   dk[l]  = dL/dK_l, K_l the POST-RoPE keys of layer l exactly as the KV cache holds them
//   dv[l]  = dL/dV_l, V_l the v_proj output (+ bias) as cached
// K_l and V_l are read only by layer l's attention, so these are the gradients through that one
// use; the backward still runs through every layer, since K_l depends on what earlier layers see.
//
// Weights are dequantized from their GGUF encodings once, at construction, into Real matrices
// (SmolLM2-135M: ~0.5 GB in float); x W^T and dy W go to OpenBLAS. Real = float for calibration,
// double for finite-difference checks. Threads: whatever mpkv::set_num_threads set.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"
#include "quant/quant_options.h"

namespace mpkv::calib {

// Per-sequence results; every per-layer array is [T, n_head_kv, head_dim] row-major.
template <typename Real>
struct KvGradients {
  int n_tokens = 0;
  double loss = 0;                        // mean next-token NLL over the T-1 predictions
  std::vector<std::vector<Real>> k, v;    // [layer] post-RoPE keys, values
  std::vector<std::vector<Real>> dk, dv;  // [layer] dL/dK, dL/dV
  // With ActivationBackward::set_quantized_pairs: the same gradients through the quantized
  // (query, key) pairs only (empty otherwise).
  std::vector<std::vector<Real>> dk_q, dv_q;
};

// The (query, key) pairs whose key and value the KV cache holds quantized (docs/calibration.md,
// "What the runtime quantizes"): for query position t of `layer`, keys [k0, k1) (k0 >= k1: none).
// The KV cache quantizes from the sink on, up to its fp16 window, so k1 grows with t.
using QuantizedKeyRange = std::function<void(int layer, int query, int& k0, int& k1)>;

// One cached entry moved by delta after RoPE (finite-difference checks): index into layer's
// [T, n_head_kv, head_dim] key (role key) or value (role value) array.
struct KvPerturbation {
  int layer = 0;
  KvRole role = KvRole::key;
  size_t index = 0;
  double delta = 0;
};

// Sees each layer's post-RoPE queries [T, n_head, head_dim] (times the query scale: what attention
// reads) and keys, values [T, n_head_kv, head_dim] (after any perturbation) during the forward.
template <typename Real>
using QkvObserver = std::function<void(int layer, int n_tokens, const Real* q, const Real* k, const Real* v)>;

template <typename Real>
class ActivationBackward {
 public:
  // Dequantizes every weight; throws Error when the architecture lacks something needed.
  explicit ActivationBackward(const Model& model);

  // Forward only. RoPE positions are t * pos_scale (positional interpolation; the model's own
  // rope_scale divides as in the engine). Returns the loss. Error when T < 2 or a token is outside
  // the vocabulary.
  double loss(const std::vector<int32_t>& tokens, double pos_scale, const KvPerturbation* perturb = nullptr,
              const QkvObserver<Real>& observer = {});

  // Forward only as far as the observer needs: every layer's q, k, v, without the last layer's
  // attention and FFN or the LM head (key maxima, smoothing samples).
  void observe(const std::vector<int32_t>& tokens, double pos_scale, const QkvObserver<Real>& observer);

  // Forward and backward; fills out (resized). observer as in loss().
  void run(const std::vector<int32_t>& tokens, double pos_scale, KvGradients<Real>& out,
           const QkvObserver<Real>& observer = {});

  const ModelConfig& config() const { return config_; }

  // When set (non-empty), run() also fills out.dk_q / out.dv_q: dL/dK and dL/dV through the pairs
  // `range` names only (the gradient the quantization error of those pairs meets).
  void set_quantized_pairs(QuantizedKeyRange range) { quantized_pairs_ = std::move(range); }

 private:
  struct DenseLayer {
    std::vector<Real> wq, wk, wv, wo, wg, wu, wd;  // [rows, cols] as in the GGUF
    std::vector<Real> attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
    std::vector<Real> attn_post_norm, ffn_post_norm;  // gemma3
  };
  // What the backward needs from one layer's forward.
  struct Saved {
    std::vector<Real> x_in, inv_rms1;       // residual stream entering the layer [T, d]; [T]
    std::vector<Real> q_pre, k_pre, rq, rk;  // qwen3: q, k before the QK norm; its inv rms [T*heads]
    std::vector<Real> q, k, v;               // post-RoPE q, k; v
    std::vector<Real> attn, lse;             // attention output [T, q_dim]; log-sum-exp [n_head, T]
    std::vector<Real> attn_proj, inv_rms_pa; // post-norms: W_o output before its norm [T, d]; [T]
    std::vector<Real> x_mid, inv_rms2;       // stream after attention [T, d]; [T]
    std::vector<Real> g, u;                  // gate and up projections [T, d_ffn]
    std::vector<Real> ffn_proj, inv_rms_pf;  // post-norms: W_down output before its norm [T, d]; [T]
  };

  double forward(const std::vector<int32_t>& tokens, double pos_scale, const KvPerturbation* perturb,
                 const QkvObserver<Real>& observer, bool keep, bool observe_only);
  // qkv_only: stop after the observer (the last layer of observe()).
  void layer_forward(int l, int T, const KvPerturbation* perturb, const QkvObserver<Real>& observer, Saved& s,
                     bool keep, bool qkv_only);
  // The steps of layer_forward, each updating x_ (the stream) and s (kept for the backward when keep).
  void qkv_forward(int l, int T, Saved& s, bool keep);
  void attention_block_forward(int l, int T, Saved& s, bool keep);
  void ffn_forward(int l, int T, Saved& s, bool keep);
  void attention_forward(int l, int T, const Real* q, const Real* k, const Real* v, Real* out, Real* lse);
  // Mean NLL; when grad, dxf_ = dL/d(final normed stream).
  double lm_head(const std::vector<int32_t>& tokens, bool grad);
  void layer_backward(int l, int T, KvGradients<Real>& out);
  // The steps of layer_backward, in its order (ffn_forward, attention_block_forward, qkv_forward
  // undone in reverse).
  void ffn_backward(int l, int T);
  void attention_backward(int l, int T);
  struct ThreadScratch;
  void attention_task_backward(int l, int T, int h, int r0, int r1, ThreadScratch& ts);
  void collect_kv_gradients(int l, int T, KvGradients<Real>& out);
  void qkv_backward(int l, int T);
  // Back through one post-norm (out = rmsnorm(proj)) when the model has them: returns dL/dproj
  // (in dproj_), else dy itself.
  const Real* post_norm_backward(const std::vector<Real>& proj, const std::vector<Real>& w,
                                 const std::vector<Real>& inv_rms, const Real* dy, int T);
  // pos_ = the RoPE positions t * pos_scale_ (the layer's scaling is in its RopePairTable).
  void layer_positions(int l, int T);
  // dV_q, dK_q contributions of one (head, query block) task: P and dS [nr, nk] (column j = key
  // key0 + j) masked to the quantized pairs of each query.
  void quantized_pair_grads(int l, int r0, int nr, int g, const Real* P, const Real* dS, int key0, int nk,
                            const Real* qh, const Real* doh, Real sc, ThreadScratch& ts) const;

  const Model& model_;
  ModelConfig config_;
  std::vector<DenseLayer> layers_;
  std::vector<Real> output_, output_norm_;  // [n_vocab, d], [d]
  std::vector<Saved> saved_;
  std::vector<double> pos_;                 // [T] RoPE positions of the current layer
  double pos_scale_ = 1.0;
  struct ThreadScratch {
    std::vector<Real> p, dp;      // attention block [kAttnBlock, T]
    std::vector<Real> logits;     // LM-head chunk [kLmHeadRows, n_vocab]
    std::vector<Real> dk, dv;     // this thread's dK / dV sums [T, kv_dim]
    std::vector<Real> dk_q, dv_q, pm;  // the same through quantized pairs; masked block [nr, nk]
  };
  std::vector<ThreadScratch> thread_scratch_;  // [omp_get_max_threads()]
  QuantizedKeyRange quantized_pairs_;
  // Working buffers.
  std::vector<Real> x_, xn_, inv_rms_f_, xf_, dxf_, dx_, dxn_, q_, k_, v_, attn_, tmp_, g_, u_, h_;
  std::vector<Real> dq_, dk_, dv_, dattn_, dg_, du_, dproj_;
};

extern template class ActivationBackward<float>;
extern template class ActivationBackward<double>;

}  // namespace mpkv::calib

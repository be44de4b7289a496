#include "model/model_weights.h"

#include <cmath>
#include <set>

#include "util/error.h"

namespace mpkv {

namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

class Loader {
 public:
  explicit Loader(const GgufReader& g) : g_(g) {}

  // A 2-D weight of `rows` outputs x `cols` inputs (GGUF dims = [cols, rows]).
  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    const GgufTensorInfo& t = take(name);
    if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows) {
      throw Error("tensor '" + name + "' has shape " + dims_str(t.dims) + ", expected [" + std::to_string(cols) +
                  ", " + std::to_string(rows) + "]");
    }
    const GgmlTypeInfo* info = ggml_type_info((uint32_t)t.type);
    if (!info || !info->supported) {
      throw Error("tensor '" + name + "' has type " + ggml_type_name((uint32_t)t.type) + ", which mpkv does not support");
    }
    WeightMatrix w;
    w.type = t.type;
    w.rows = rows;
    w.cols = cols;
    w.data = t.data;
    w.row_bytes = ggml_row_bytes(t.type, cols);
    return w;
  }

  VectorWeight vec(const std::string& name, int64_t n) {
    const GgufTensorInfo& t = take(name);
    if (t.n_elements() != n) {
      throw Error("tensor '" + name + "' has shape " + dims_str(t.dims) + ", expected [" + std::to_string(n) + "]");
    }
    if (t.type != GgmlType::F32) {
      throw Error("tensor '" + name + "' has type " + ggml_type_name((uint32_t)t.type) + "; norms and biases must be F32");
    }
    return VectorWeight{reinterpret_cast<const float*>(t.data), n};
  }

  bool has(const std::string& name) const { return g_.find_tensor(name) != nullptr; }

  // Error naming the first tensor of the file that no matrix() / vec() call took.
  void check_all_used(const ModelConfig& c) const {
    for (const GgufTensorInfo& t : g_.tensors())
      if (!used_.count(t.name))
        throw Error("model " + g_.path() + " has tensor '" + t.name + "' that mpkv does not use for architecture " +
                    c.arch_name + ": running without it would compute a different model (docs/models.md, \"Tensors\")");
  }

 private:
  const GgufTensorInfo& take(const std::string& name) {
    used_.insert(name);
    return g_.tensor(name);
  }

  const GgufReader& g_;
  std::set<std::string> used_;
};

// A tensor of RoPE frequency factors (llama's rope_freqs.weight, phi3's rope_factors_long /
// rope_factors_short.weight): F32 [rope_dim / 2], every factor finite and positive (each divides a
// pair's frequency). A file breaking this is an input error naming the tensor.
VectorWeight rope_freq_factors(Loader& ld, const ModelConfig& c, const std::string& name) {
  const VectorWeight f = ld.vec(name, c.rope_dim / 2);
  for (int64_t j = 0; j < f.n; ++j)
    MPKV_CHECK(std::isfinite(f.data[j]) && f.data[j] > 0.0f,
               "tensor '" + name + "' has factor " + std::to_string(f.data[j]) + " at pair " + std::to_string(j) +
                   "; RoPE frequency factors must be finite and positive");
  return f;
}

// Rows [r0, r0 + n) of m: a view of the same GGUF rows (each row is encoded on its own).
WeightMatrix row_slice(const WeightMatrix& m, int64_t r0, int64_t n) {
  WeightMatrix s = m;
  s.rows = n;
  s.data = m.data + (size_t)r0 * m.row_bytes;
  return s;
}

// phi3's fused tensors as llama.cpp splits them (docs/models.md, "phi3"): `attn_qkv` holds the
// rows of Q, then K, then V (its build_qkv views at offsets 0, q_dim, q_dim + kv_dim; a file with
// separate attn_q / attn_k / attn_v is read as llama's); `ffn_up` holds 2 x d_ffn rows, the gate
// first (ggml_swiglu: silu of the first half times the second half).
void load_phi3_fused(Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  if (ld.has(p + "attn_qkv.weight")) {
    const WeightMatrix qkv = ld.matrix(p + "attn_qkv.weight", c.q_dim() + 2 * c.kv_dim(), c.d_model);
    L.wq = row_slice(qkv, 0, c.q_dim());
    L.wk = row_slice(qkv, c.q_dim(), c.kv_dim());
    L.wv = row_slice(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
  } else {
    L.wq = ld.matrix(p + "attn_q.weight", c.q_dim(), c.d_model);
    L.wk = ld.matrix(p + "attn_k.weight", c.kv_dim(), c.d_model);
    L.wv = ld.matrix(p + "attn_v.weight", c.kv_dim(), c.d_model);
  }
  const WeightMatrix up = ld.matrix(p + "ffn_up.weight", 2 * (int64_t)c.d_ffn, c.d_model);
  L.w_gate = row_slice(up, 0, c.d_ffn);
  L.w_up = row_slice(up, c.d_ffn, c.d_ffn);
}

}  // namespace

ModelWeights ModelWeights::from_gguf(const GgufReader& g, const ModelConfig& c) {
  Loader ld(g);
  ModelWeights w;
  w.token_embd = ld.matrix("token_embd.weight", c.n_vocab, c.d_model);
  w.output_norm = ld.vec("output_norm.weight", c.d_model);
  if (ld.has("output.weight")) {
    w.output = ld.matrix("output.weight", c.n_vocab, c.d_model);
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  // llama.cpp reads rope_freqs.weight for llama (not for qwen2, qwen3, gemma3): docs/models.md, "RoPE".
  if (c.arch == Arch::llama && ld.has("rope_freqs.weight")) w.rope_freqs = rope_freq_factors(ld, c, "rope_freqs.weight");
  // phi3's longrope: both tensors validated, the one the config chose for its context applied.
  if (c.longrope.factors != LongropeFactors::none) {
    const VectorWeight long_factors = rope_freq_factors(ld, c, "rope_factors_long.weight");
    const VectorWeight short_factors = rope_freq_factors(ld, c, "rope_factors_short.weight");
    w.rope_freqs = c.longrope.factors == LongropeFactors::long_factors ? long_factors : short_factors;
  }
  w.layers.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    L.attn_norm = ld.vec(p + "attn_norm.weight", c.d_model);
    if (c.arch == Arch::phi3) {
      load_phi3_fused(ld, c, p, L);
    } else {
      L.wq = ld.matrix(p + "attn_q.weight", c.q_dim(), c.d_model);
      L.wk = ld.matrix(p + "attn_k.weight", c.kv_dim(), c.d_model);
      L.wv = ld.matrix(p + "attn_v.weight", c.kv_dim(), c.d_model);
      L.w_gate = ld.matrix(p + "ffn_gate.weight", c.d_ffn, c.d_model);
      L.w_up = ld.matrix(p + "ffn_up.weight", c.d_ffn, c.d_model);
    }
    L.wo = ld.matrix(p + "attn_output.weight", c.d_model, c.q_dim());
    if (c.qkv_bias) {
      L.bq = ld.vec(p + "attn_q.bias", c.q_dim());
      L.bk = ld.vec(p + "attn_k.bias", c.kv_dim());
      L.bv = ld.vec(p + "attn_v.bias", c.kv_dim());
    }
    if (c.qk_norm) {
      L.q_norm = ld.vec(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = ld.vec(p + "attn_k_norm.weight", c.head_dim);
    }
    if (c.post_norms) {
      L.attn_post_norm = ld.vec(p + "post_attention_norm.weight", c.d_model);
      L.ffn_post_norm = ld.vec(p + "post_ffw_norm.weight", c.d_model);
    }
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", c.d_model);
    L.w_down = ld.matrix(p + "ffn_down.weight", c.d_model, c.d_ffn);
  }
  ld.check_all_used(c);
  w.pack_matrices();
  return w;
}

void ModelWeights::pack_matrices() {
  auto pack = [&](WeightMatrix& m) {
    std::shared_ptr<const PackedMatrix> p = pack_weight_matrix(m);
    m.packed = p.get();
    if (p) packed_store.push_back(std::move(p));
  };
  for (LayerWeights& L : layers)
    for (WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) pack(*m);
  pack(output);  // token_embd keeps its GGUF rows for the embedding lookup; a tied head is a copy
}

}  // namespace mpkv

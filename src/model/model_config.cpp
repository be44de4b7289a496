#include "model/model_config.h"

#include <sstream>

#include "util/error.h"

namespace mpkv {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
  }
  return "?";
}

ModelConfig ModelConfig::from_gguf(const GgufReader& g) {
  ModelConfig c;
  c.arch_name = g.get_string("general.architecture", "");
  if (c.arch_name == "llama") c.arch = Arch::llama;
  else if (c.arch_name == "qwen2") c.arch = Arch::qwen2;
  else if (c.arch_name == "qwen3") c.arch = Arch::qwen3;
  else
    throw Error("unsupported model architecture '" + c.arch_name + "' in " + g.path() +
                " (mpkv supports llama, qwen2, qwen3)");
  const std::string a = c.arch_name + ".";
  auto req = [&](const std::string& key) -> int64_t {
    if (!g.has(a + key)) throw Error("model " + g.path() + " lacks metadata key '" + a + key + "'");
    return g.get(a + key).as_int();
  };
  c.name = g.get_string("general.name", "");
  c.n_layer = (int)req("block_count");
  c.d_model = (int)req("embedding_length");
  c.n_head = (int)req("attention.head_count");
  c.n_head_kv = (int)g.get_int(a + "attention.head_count_kv", c.n_head);
  c.d_ffn = (int)req("feed_forward_length");
  c.n_ctx_train = (int)g.get_int(a + "context_length", 2048);
  c.rms_eps = (float)g.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_base = (float)g.get_float(a + "rope.freq_base", 10000.0);
  MPKV_CHECK(c.n_layer > 0 && c.d_model > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.d_ffn > 0,
             "model " + g.path() + " has non-positive hyperparameters");
  MPKV_CHECK(c.n_head % c.n_head_kv == 0, "head_count " + std::to_string(c.n_head) +
                                              " is not a multiple of head_count_kv " + std::to_string(c.n_head_kv));
  c.head_dim = (int)g.get_int(a + "attention.key_length", c.d_model / c.n_head);
  const int v_len = (int)g.get_int(a + "attention.value_length", c.head_dim);
  MPKV_CHECK(v_len == c.head_dim, "key_length != value_length is not supported");
  MPKV_CHECK(c.head_dim % 2 == 0 && c.head_dim <= 512, "unsupported head_dim " + std::to_string(c.head_dim));
  c.rope_dim = (int)g.get_int(a + "rope.dimension_count", c.head_dim);
  MPKV_CHECK(c.rope_dim == c.head_dim, "partial RoPE (rope.dimension_count " + std::to_string(c.rope_dim) +
                                           " < head_dim) is not supported");
  const std::string scaling = g.get_string(a + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_scale = (float)g.get_float(a + "rope.scaling.factor", 1.0);
    MPKV_CHECK(c.rope_scale > 0, "rope.scaling.factor must be positive");
  } else if (scaling != "none") {
    throw Error("unsupported RoPE scaling type '" + scaling + "' (supported: none, linear)");
  }
  if (c.arch == Arch::llama) {
    c.rope_style = RopeStyle::adjacent;
  } else {
    c.rope_style = RopeStyle::neox;
    c.qkv_bias = c.arch == Arch::qwen2;
    c.qk_norm = c.arch == Arch::qwen3;
  }
  // vocab size: metadata key when present, else the token list.
  if (g.has(a + "vocab_size")) c.n_vocab = (int)g.get(a + "vocab_size").as_int();
  else if (g.has("tokenizer.ggml.tokens")) c.n_vocab = (int)g.get("tokenizer.ggml.tokens").as_array().size();
  MPKV_CHECK(c.n_vocab > 0, "model " + g.path() + " has no vocabulary size");
  return c;
}

std::string ModelConfig::describe() const {
  std::ostringstream o;
  o << "architecture   " << arch_name << "\n"
    << "name           " << name << "\n"
    << "layers         " << n_layer << "\n"
    << "d_model        " << d_model << "\n"
    << "heads          " << n_head << " (KV heads " << n_head_kv << ", head_dim " << head_dim << ")\n"
    << "ffn            " << d_ffn << "\n"
    << "vocab          " << n_vocab << "\n"
    << "context        " << n_ctx_train << "\n"
    << "rope           base " << rope_base << ", scale " << rope_scale << ", "
    << (rope_style == RopeStyle::adjacent ? "adjacent pairs" : "neox pairs") << "\n"
    << "rms eps        " << rms_eps << "\n";
  return o.str();
}

}  // namespace mpkv

#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "util/error.h"

namespace mpkv {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
    case Arch::gemma3: return "gemma3";
    case Arch::phi3: return "phi3";
  }
  return "?";
}

namespace {

// gemma3 as llama.cpp defines it (docs/gemma3.md): scaled embeddings, GeGLU, post-norms, and
// when the file has a sliding window, five of every six layers (l % 6 < 5) attend within it with
// RoPE base 10000 and no scaling; the others are global with the file's RoPE base and scaling.
void read_gemma3(const GgufReader& g, ModelConfig& c) {
  const std::string a = c.arch_name + ".";
  c.embd_scale = std::sqrt((float)c.d_model);
  c.ffn_act = FfnActivation::gelu_tanh;
  c.post_norms = true;
  // llama.cpp's softmax scale (the GGUF carries no query_pre_attn_scalar): 1/sqrt(head_dim), except
  // for the 62-layer (27B) model: 1/sqrt(d_model / n_head).
  if (c.n_layer == 62) c.query_scale = (float)std::sqrt((double)c.head_dim / (c.d_model / c.n_head));
  c.final_softcap = (float)g.get_float(a + "final_logit_softcapping", 0.0);
  MPKV_CHECK(c.final_softcap >= 0 && std::isfinite(c.final_softcap), "final_logit_softcapping must be >= 0");
  const int window = (int)g.get_int(a + "attention.sliding_window", 0);
  MPKV_CHECK(window >= 0, "attention.sliding_window must be >= 0");
  if (window == 0) return;
  constexpr int kPattern = 6;  // every 6th layer (l % 6 == 5) is global
  for (int l = 0; l < c.n_layer; ++l)
    if (l % kPattern < kPattern - 1) c.layer_attn[l] = LayerAttention{window, 10000.0f, 1.0f};
}

// YaRN's parameters and attention factor as llama.cpp derives them (llama_context's constructor,
// docs/models.md "YaRN"): ext_factor 1, beta_fast 32 / beta_slow 1 (the architectures here read no
// `rope.scaling.yarn_*` key), the original context from `rope.scaling.original_context_length`, and
// an attention factor get_mscale(f) / (1 + 0.1 ln f) that cancels the mscale ggml's rope multiplies
// in again (ops.h, RopeParams), all in float as llama.cpp computes them.
void derive_yarn(const GgufReader& g, ModelConfig& c) {
  const std::string a = c.arch_name + ".";
  c.rope_yarn.ext_factor = 1.0f;
  c.rope_yarn.n_ctx_orig = (int)g.get_int(a + "rope.scaling.original_context_length", c.n_ctx_train);
  MPKV_CHECK(c.rope_yarn.n_ctx_orig > 0, "model " + g.path() + " has " + a +
                                             "rope.scaling.original_context_length = " +
                                             std::to_string(c.rope_yarn.n_ctx_orig) + "; it must be > 0");
  const float factor = 1.0f / (1.0f / c.rope_scale);  // llama.cpp: 1 / cparams.rope_freq_scale
  const float mscale = factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f;
  c.rope_attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(factor)));
}

// The RoPE scaling keys as llama.cpp reads them (docs/models.md, "RoPE"): `rope.scaling.type`
// defaults to linear; the factor is `rope.scaling.factor`, else the older `rope.scale_linear`, and 0
// or absent means 1; type none ignores the factor, longrope divides positions by it as linear does.
// `rope.scaling.attn_factor` (default 1) multiplies RoPE's cos / sin under every type (phi3's
// converter writes longrope's sqrt(1 + ln(s) / ln(original context)) there).
void read_rope_scaling(const GgufReader& g, ModelConfig& c) {
  const std::string a = c.arch_name + ".";
  const std::string type_key = a + "rope.scaling.type";
  const std::string type = g.get_string(type_key, "linear");
  if (type == "none") {
    c.rope_scaling = RopeScaling::none;
  } else if (type == "linear") {
    c.rope_scaling = RopeScaling::linear;
  } else if (type == "yarn") {
    c.rope_scaling = RopeScaling::yarn;
  } else if (type == "longrope") {
    c.rope_scaling = RopeScaling::longrope;
  } else {
    throw Error("model " + g.path() + " has unknown " + type_key + " = '" + type +
                "' (llama.cpp and mpkv know none, linear, yarn, longrope)");
  }
  std::string factor_key = a + "rope.scaling.factor";
  if (!g.has(factor_key)) factor_key = a + "rope.scale_linear";
  const double factor = g.get_float(factor_key, 0.0);
  MPKV_CHECK(std::isfinite(factor) && factor >= 0.0,
             "model " + g.path() + " has " + factor_key + " = " + std::to_string(factor) + "; it must be >= 0");
  if (c.rope_scaling != RopeScaling::none && factor != 0.0) c.rope_scale = (float)factor;
  if (c.rope_scaling == RopeScaling::yarn) derive_yarn(g, c);
  const std::string attn_key = a + "rope.scaling.attn_factor";
  const double attn_factor = g.get_float(attn_key, 1.0);
  MPKV_CHECK(std::isfinite(attn_factor) && attn_factor > 0.0,
             "model " + g.path() + " has " + attn_key + " = " + std::to_string(attn_factor) + "; it must be > 0");
  c.rope_attn_factor *= (float)attn_factor;
}

// `<arch>.attention.sliding_window` of llama / phi3: llama.cpp does not apply it (its llama graph
// builds no sliding-window mask; its phi3 loader sets the window to 0, "Phi SWA is currently
// disabled"), so neither does mpkv; the value is kept for `mpkv info` (docs/models.md).
void read_unapplied_window(const GgufReader& g, ModelConfig& c) {
  const std::string key = c.arch_name + ".attention.sliding_window";
  const int64_t w = g.get_int(key, 0);
  MPKV_CHECK(w >= 0 && w <= INT32_MAX, "model " + g.path() + " has " + key + " = " + std::to_string(w) +
                                           "; it must be >= 0");
  c.unapplied_sliding_window = (int)w;
}

// phi3's longrope factors as llama.cpp chooses them (llama_model::get_rope_factors; docs/models.md,
// "Longrope"): with both tensors in the file, rope_factors_long.weight when the context per sequence
// exceeds `rope.scaling.original_context_length` (absent: context_length), else
// rope_factors_short.weight. The context is compared as llama.cpp has it: rounded up to a multiple
// of 256 (its context constructor pads n_ctx so), so that mpkv's -c N picks what llama.cpp's -c N
// picks. llama.cpp reads them for phi3 only; on another architecture they are tensors it does not
// use, which ModelWeights refuses by name. n_ctx 0: context_length stands in.
void choose_longrope(const GgufReader& g, ModelConfig& c, int n_ctx) {
  // The commands check their -c; a negative context here is a caller's bug.
  MPKV_ASSERT(n_ctx >= 0, "Model::load given the context " + std::to_string(n_ctx));
  const bool has_long = g.find_tensor("rope_factors_long.weight") != nullptr;
  const bool has_short = g.find_tensor("rope_factors_short.weight") != nullptr;
  if (c.arch != Arch::phi3 || (!has_long && !has_short)) return;
  // llama.cpp would run such a file without factors for one context and with them for the other.
  MPKV_CHECK(has_long && has_short, "model " + g.path() + " has tensor '" +
                                        (has_long ? "rope_factors_long.weight" : "rope_factors_short.weight") +
                                        "' but not '" +
                                        (has_long ? "rope_factors_short.weight" : "rope_factors_long.weight") +
                                        "'; phi3's longrope needs both (docs/models.md, \"Longrope\")");
  const std::string key = c.arch_name + ".rope.scaling.original_context_length";
  const int64_t orig = g.get_int(key, c.n_ctx_train);
  MPKV_CHECK(orig > 0 && orig <= INT32_MAX,
             "model " + g.path() + " has " + key + " = " + std::to_string(orig) + "; it must be > 0");
  Longrope& lr = c.longrope;
  lr.n_ctx_orig = (int)orig;
  lr.n_ctx_given = n_ctx > 0;
  lr.n_ctx = n_ctx > 0 ? n_ctx : c.n_ctx_train;
  constexpr int64_t kLlamaCppCtxPad = 256;
  lr.n_ctx_compared = ((int64_t)lr.n_ctx + kLlamaCppCtxPad - 1) / kLlamaCppCtxPad * kLlamaCppCtxPad;
  lr.factors = lr.n_ctx_compared > lr.n_ctx_orig ? LongropeFactors::long_factors : LongropeFactors::short_factors;
}

}  // namespace

const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::none: return "none";
    case RopeScaling::linear: return "linear";
    case RopeScaling::yarn: return "yarn";
    case RopeScaling::longrope: return "longrope";
  }
  return "?";
}

const char* longrope_tensor_name(LongropeFactors f) {
  switch (f) {
    case LongropeFactors::none: return "none";
    case LongropeFactors::short_factors: return "rope_factors_short.weight";
    case LongropeFactors::long_factors: return "rope_factors_long.weight";
  }
  return "?";
}

KvDims ModelConfig::kv_dims() const {
  KvDims d{n_layer, n_head, n_head_kv, head_dim};
  // Only models with a sliding-window layer list windows, so others keep today's dims.
  if (std::any_of(layer_attn.begin(), layer_attn.end(), [](const LayerAttention& la) { return la.window > 0; }))
    for (const LayerAttention& la : layer_attn) d.window.push_back(la.window);
  return d;
}

ModelConfig ModelConfig::from_gguf(const GgufReader& g, int n_ctx) {
  ModelConfig c;
  c.arch_name = g.get_string("general.architecture", "");
  if (c.arch_name == "llama") c.arch = Arch::llama;
  else if (c.arch_name == "qwen2") c.arch = Arch::qwen2;
  else if (c.arch_name == "qwen3") c.arch = Arch::qwen3;
  else if (c.arch_name == "gemma3") c.arch = Arch::gemma3;
  else if (c.arch_name == "phi3") c.arch = Arch::phi3;
  else
    throw Error("unsupported model architecture '" + c.arch_name + "' in " + g.path() +
                " (mpkv supports llama, qwen2, qwen3, gemma3, phi3)");
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
  read_rope_scaling(g, c);
  if (c.arch == Arch::llama) {
    c.rope_style = RopeStyle::adjacent;
  } else {
    c.rope_style = RopeStyle::neox;
    c.qkv_bias = c.arch == Arch::qwen2;
    c.qk_norm = c.arch == Arch::qwen3 || c.arch == Arch::gemma3;
  }
  // phi3's attention output is [d_model, d_model] in llama.cpp: its queries are d_model wide.
  MPKV_CHECK(c.arch != Arch::phi3 || c.q_dim() == c.d_model,
             "model " + g.path() + " is phi3 with head_count x key_length = " + std::to_string(c.q_dim()) +
                 " != embedding_length " + std::to_string(c.d_model) + " (llama.cpp requires them equal)");
  c.layer_attn.assign(c.n_layer, LayerAttention{0, c.rope_base, c.rope_scale});
  if (c.arch == Arch::gemma3) read_gemma3(g, c);
  if (c.arch == Arch::llama || c.arch == Arch::phi3) read_unapplied_window(g, c);
  choose_longrope(g, c, n_ctx);
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
    << "rope           base " << rope_base << ", scaling " << rope_scaling_name(rope_scaling) << " (scale "
    << rope_scale << "), "
    << (rope_style == RopeStyle::adjacent ? "adjacent pairs" : "neox pairs") << "\n";
  if (rope_scaling == RopeScaling::yarn)
    o << "rope yarn      original context " << rope_yarn.n_ctx_orig << ", ext_factor " << rope_yarn.ext_factor
      << ", beta_fast " << rope_yarn.beta_fast << ", beta_slow " << rope_yarn.beta_slow
      << " (llama.cpp's, not the file's rope.scaling.yarn_* keys)\n";
  if (rope_attn_factor != 1.0f || rope_scaling == RopeScaling::yarn)
    o << "rope mscale    cos and sin x " << rope_attn_factor
      << (rope_scaling == RopeScaling::yarn ? " x (1 + 0.1 ln scale) on scaled layers" : "") << "\n";
  if (longrope.factors != LongropeFactors::none) o << "rope longrope  " << longrope_choice() << "\n";
  o << "rms eps        " << rms_eps << "\n";
  if (unapplied_sliding_window > 0)
    o << "sliding window " << arch_name << ".attention.sliding_window = " << unapplied_sliding_window
      << " not applied: every layer is global, as llama.cpp runs " << arch_name << " (docs/models.md)\n";
  int n_local = 0;
  for (const LayerAttention& la : layer_attn) n_local += la.window > 0;
  if (n_local > 0) {
    o << "sliding window " << n_local << " of " << n_layer << " layers attend within the last "
      << layer_attn[0].window << " positions (RoPE base " << layer_attn[0].rope_base << "); global layers:";
    for (int l = 0; l < n_layer; ++l)
      if (layer_attn[l].window == 0) o << " " << l;
    o << "\n";
  }
  if (arch == Arch::gemma3)
    o << "gemma          embeddings x " << embd_scale << ", GeGLU (gelu tanh), post-norms, query scale "
      << query_scale << (final_softcap > 0 ? ", logit softcap " + std::to_string(final_softcap) : std::string()) << "\n";
  return o.str();
}

std::string ModelConfig::longrope_choice() const {
  const Longrope& lr = longrope;
  if (lr.factors == LongropeFactors::none) return "";
  const bool is_long = lr.factors == LongropeFactors::long_factors;
  const std::string rounded =
      lr.n_ctx_compared != lr.n_ctx ? ", " + std::to_string(lr.n_ctx_compared) + " as llama.cpp rounds it up" : "";
  return std::string(longrope_tensor_name(lr.factors)) + ": context " + std::to_string(lr.n_ctx) +
         (lr.n_ctx_given ? "" : " (none given: context_length, as llama.cpp's n_ctx 0)") + rounded +
         (is_long ? " > " : " <= ") + "original context " + std::to_string(lr.n_ctx_orig) +
         " (llama.cpp's rule: long factors only beyond the original context; docs/models.md, \"Longrope\")";
}

}  // namespace mpkv

// What Model::load refuses, and that the error names the key or tensor that stops it
// (docs/models.md): an unknown RoPE scaling type, a non-positive attention factor, bad
// rope_freqs.weight, bad or unpaired phi3 longrope factors, and any tensor the architecture does not
// use. Also what it accepts: the scaling keys as llama.cpp reads them (absent type = linear, none
// ignores the factor, YaRN's derived parameters, longrope), phi3's longrope factors chosen by the
// context, and the sliding-window keys it does not apply.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "fixtures/tiny_model.h"
#include "test_support.h"
#include "util/error.h"

namespace mpkv {
namespace {

// The Error Model::load throws for this spec ("" when it loads).
std::string load_error(const std::string& name, const test::TinyModelSpec& spec) {
  try {
    test::load_tiny_model(name, spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// llama.cpp gives rope.scaling.type = longrope nothing of its own: positions are divided by the
// factor as under linear (no YaRN), and without factor tensors (any architecture but phi3, or a phi3
// file without them) no frequency factors apply.
TEST(LoadRefusals, LongropeTypeIsReadAsLlamaCppReadsIt) {
  test::TinyModelSpec spec;
  spec.rope_scaling_type = "longrope";
  spec.rope_scaling_factor = 4.0f;
  auto m = test::load_tiny_model("longrope_type_llama", spec);
  EXPECT_EQ(m->config().rope_scaling, RopeScaling::longrope);
  EXPECT_EQ(m->config().rope_scale, 4.0f);
  EXPECT_EQ(m->config().rope_yarn.ext_factor, 0.0f);
  EXPECT_EQ(m->config().longrope.factors, LongropeFactors::none);
  EXPECT_EQ(m->weights().rope_freqs.data, nullptr);
  EXPECT_EQ(m->config().longrope_choice(), "");
}

// YaRN's parameters as llama.cpp derives them for llama / qwen: ext_factor 1, beta 32 / 1 whatever
// the file's yarn_beta_fast says, the original context from its key (else context_length 256), and
// an attention factor get_mscale(4) / (1 + 0.1 ln 4) = 1 (to float rounding) times the file's.
TEST(LoadRefusals, YarnParametersAsLlamaCppDerivesThem) {
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.rope_scaling_type = "yarn";
  spec.rope_scaling_factor = 4.0f;
  spec.rope_yarn_beta_fast = 8.0f;
  auto m = test::load_tiny_model("yarn_default_ctx", spec);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.rope_scaling, RopeScaling::yarn);
  EXPECT_EQ(c.rope_scale, 4.0f);
  EXPECT_EQ(c.rope_yarn.ext_factor, 1.0f);
  EXPECT_EQ(c.rope_yarn.beta_fast, 32.0f);
  EXPECT_EQ(c.rope_yarn.beta_slow, 1.0f);
  EXPECT_EQ(c.rope_yarn.n_ctx_orig, 256);
  EXPECT_NEAR(c.rope_attn_factor, 1.0f, 1e-6f);
  spec.rope_orig_ctx = 100;
  spec.rope_attn_factor = 0.5f;
  m = test::load_tiny_model("yarn_orig_ctx", spec);
  EXPECT_EQ(m->config().rope_yarn.n_ctx_orig, 100);
  EXPECT_NEAR(m->config().rope_attn_factor, 0.5f, 1e-6f);
  spec.rope_scaling_type = "linear";  // other types: no YaRN, the attention factor as it is
  m = test::load_tiny_model("yarn_linear", spec);
  EXPECT_EQ(m->config().rope_yarn.ext_factor, 0.0f);
  EXPECT_EQ(m->config().rope_attn_factor, 0.5f);
}

TEST(LoadRefusals, UnknownScalingTypeIsNamed) {
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.rope_scaling_type = "dynamic";
  const std::string e = load_error("refuse_dynamic", spec);
  EXPECT_TRUE(contains(e, "unknown qwen2.rope.scaling.type = 'dynamic'")) << e;
}

TEST(LoadRefusals, ScalingKeysAsLlamaCppReadsThem) {
  test::TinyModelSpec spec;
  spec.rope_scaling_factor = 4.0f;  // no type key: llama.cpp's default is linear
  auto m = test::load_tiny_model("scaling_default", spec);
  EXPECT_EQ(m->config().rope_scaling, RopeScaling::linear);
  EXPECT_EQ(m->config().rope_scale, 4.0f);
  EXPECT_EQ(m->config().attn(0).rope_scale, 4.0f);
  spec.rope_scaling_type = "none";  // none: the factor is ignored
  m = test::load_tiny_model("scaling_none", spec);
  EXPECT_EQ(m->config().rope_scaling, RopeScaling::none);
  EXPECT_EQ(m->config().rope_scale, 1.0f);
  spec.rope_scaling_type = "linear";
  spec.rope_scaling_factor = -2.0f;
  EXPECT_TRUE(contains(load_error("scaling_negative", spec), "llama.rope.scaling.factor = -2")) << "negative factor";
  // gemma3: the sliding-window layers keep scale 1, the global ones take the factor.
  spec = test::tiny_gemma3_spec(4);
  spec.rope_scaling_type = "linear";
  spec.rope_scaling_factor = 8.0f;
  m = test::load_tiny_model("scaling_gemma3", spec);
  EXPECT_EQ(m->config().attn(0).rope_scale, 1.0f);
  EXPECT_EQ(m->config().attn(5).rope_scale, 8.0f);
}

TEST(LoadRefusals, RopeFreqsMustBeF32OfHalfTheRopeDimAndPositive) {
  test::TinyModelSpec spec;  // head_dim 16: 8 pairs
  spec.rope_freqs = {1, 2, 3, 4};
  std::string e = load_error("freqs_short", spec);
  EXPECT_TRUE(contains(e, "tensor 'rope_freqs.weight' has shape [4], expected [8]")) << e;
  spec.rope_freqs = {1, 2, 3, 0, 5, 6, 7, 8};
  e = load_error("freqs_zero", spec);
  EXPECT_TRUE(contains(e, "'rope_freqs.weight' has factor 0.000000 at pair 3")) << e;
  spec.rope_freqs = {1, 2, 3, 4, 5, 6, 7, 8};
  auto m = test::load_tiny_model("freqs_ok", spec);
  ASSERT_NE(m->weights().rope_freqs.data, nullptr);
  EXPECT_EQ(m->weights().rope_freqs.n, 8);
  EXPECT_EQ(m->weights().rope_freqs.data[7], 8.0f);
}

// llama.cpp reads rope_freqs.weight for llama only; on qwen2 / qwen3 / gemma3 it is a tensor the
// architecture does not use. So is a llama.cpp-optional llama tensor mpkv does not implement
// (attention biases), and any stray one.
TEST(LoadRefusals, UnusedTensorIsAnErrorNamingIt) {
  struct Case { std::string arch, tensor; };
  for (const Case& k : {Case{"llama", "blk.0.attn_q.bias"}, Case{"llama", "blk.1.attn_q_norm.weight"},
                        Case{"qwen2", "rope_freqs.weight"}, Case{"gemma3", "blk.0.ffn_gate.bias"},
                        Case{"llama", "blk.9.attn_norm.weight"}}) {
    test::TinyModelSpec spec = k.arch == "gemma3" ? test::tiny_gemma3_spec(4) : test::TinyModelSpec{};
    spec.arch = k.arch;
    spec.extra_tensors = {k.tensor};
    const std::string e = load_error("unused_" + k.arch, spec);
    EXPECT_TRUE(contains(e, "has tensor '" + k.tensor + "' that mpkv does not use for architecture " + k.arch)) << e;
  }
  // The same specs without the extra tensor load: the refusal is the tensor's.
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    test::TinyModelSpec spec;
    spec.arch = arch;
    EXPECT_EQ(load_error("unused_none_" + arch, spec), "") << arch;
  }
  EXPECT_EQ(load_error("unused_none_gemma3", test::tiny_gemma3_spec(4)), "");
}

TEST(LoadRefusals, AttentionFactorMustBePositive) {
  test::TinyModelSpec spec;
  spec.rope_attn_factor = 0.5f;
  EXPECT_EQ(load_error("attn_factor_half", spec), "");
  spec.rope_attn_factor = -0.5f;
  const std::string e = load_error("attn_factor_negative", spec);
  EXPECT_TRUE(contains(e, "llama.rope.scaling.attn_factor = -0.5")) << e;
}

// phi3: fused attn_qkv / gate-up ffn_up; llama's separate ffn_gate is a tensor it does not use;
// the sliding window key is kept but not applied.
TEST(LoadRefusals, Phi3Tensors) {
  test::TinyModelSpec spec;
  spec.arch = "phi3";
  spec.sliding_window = 7;
  auto m = test::load_tiny_model("phi3_ok", spec);
  EXPECT_EQ(m->config().rope_style, RopeStyle::neox);
  EXPECT_EQ(m->config().unapplied_sliding_window, 7);
  EXPECT_TRUE(m->config().kv_dims().window.empty());
  EXPECT_EQ(m->weights().layers[1].wk.rows, m->config().kv_dim());
  EXPECT_EQ(m->weights().layers[1].w_up.rows, m->config().d_ffn);
  spec.extra_tensors = {"blk.0.ffn_gate.weight"};
  std::string e = load_error("phi3_gate", spec);
  EXPECT_TRUE(contains(e, "has tensor 'blk.0.ffn_gate.weight' that mpkv does not use for architecture phi3")) << e;
  spec.extra_tensors = {};
  spec.n_head = 8;  // q_dim 8 x 8 = 64 = d_model still; a key_length that breaks it is refused
  spec.head_dim = 16;
  e = load_error("phi3_qdim", spec);
  EXPECT_TRUE(contains(e, "head_count x key_length = 128 != embedding_length 64")) << e;
}

// phi3's longrope factor tensors are F32 [rope_dim / 2] (head_dim 16: 8 pairs) of finite positive
// factors, both checked whichever the context chooses: a bad one is an input error naming it.
TEST(LoadRefusals, LongropeFactorsMustBeF32OfHalfTheRopeDimAndPositive) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const bool corrupt_long : {false, true}) {
    const std::string t = corrupt_long ? "rope_factors_long.weight" : "rope_factors_short.weight";
    struct Case { std::vector<float> factors; std::string message; };
    for (const Case& k : {Case{{1, 2, 3, 4}, "tensor '" + t + "' has shape [4], expected [8]"},
                          Case{{1, 2, nan, 4, 5, 6, 7, 8}, "tensor '" + t + "' has factor nan at pair 2"},
                          Case{{1, 2, 3, 4, 5, 6, 7, inf}, "tensor '" + t + "' has factor inf at pair 7"},
                          Case{{1, 2, 3, 0, 5, 6, 7, 8}, "tensor '" + t + "' has factor 0.000000 at pair 3"},
                          Case{{1, -2, 3, 4, 5, 6, 7, 8}, "tensor '" + t + "' has factor -2.000000 at pair 1"}}) {
      for (const char* variant : {"phi3_longrope_short", "phi3_longrope_long"}) {  // the other tensor chosen, then it
        test::TinyModelSpec spec = test::tiny_variant_spec(variant);
        (corrupt_long ? spec.rope_factors_long : spec.rope_factors_short) = k.factors;
        const std::string e = load_error("longrope_bad", spec);
        EXPECT_TRUE(contains(e, k.message)) << variant << ": " << e;
        EXPECT_TRUE(contains(e, "finite and positive") || contains(e, "expected [8]")) << e;
      }
    }
  }
  // One tensor without the other: llama.cpp would run with no factors at one context and with
  // them at the other; mpkv names both.
  test::TinyModelSpec spec = test::tiny_variant_spec("phi3_longrope_long");
  spec.rope_factors_short.clear();
  std::string e = load_error("longrope_unpaired", spec);
  EXPECT_TRUE(contains(e, "has tensor 'rope_factors_long.weight' but not 'rope_factors_short.weight'")) << e;
  spec = test::tiny_variant_spec("phi3_longrope_long");
  spec.rope_factors_long.clear();
  e = load_error("longrope_unpaired", spec);
  EXPECT_TRUE(contains(e, "has tensor 'rope_factors_short.weight' but not 'rope_factors_long.weight'")) << e;
  // llama.cpp reads them for phi3 only: on llama they are tensors the architecture does not use.
  spec = test::tiny_variant_spec("phi3_longrope_long");
  spec.arch = "llama";
  e = load_error("longrope_llama", spec);
  EXPECT_TRUE(contains(e, "has tensor 'rope_factors_long.weight' that mpkv does not use for architecture llama")) << e;
}

// The choice follows the context the model is loaded for, by llama.cpp's rule (docs/models.md,
// "Longrope"): the long factors only when the context per sequence, rounded up to a multiple of 256
// as llama.cpp pads it, exceeds the original context (256 here); no context (0) stands for
// context_length (1024). The values are the spec's.
TEST(LoadRefusals, LongropeChoiceFollowsTheContext) {
  const test::TinyModelSpec spec = test::tiny_variant_spec("phi3_longrope_short");
  const std::string path = test::temp_dir() + "/longrope_choice.gguf";
  test::write_tiny_model(path, spec);
  struct Case { int n_ctx; bool is_long; int compared; int64_t rounded; };
  for (const Case& k : {Case{1, false, 1, 256}, Case{255, false, 255, 256}, Case{256, false, 256, 256},
                        Case{257, true, 257, 512}, Case{512, true, 512, 512}, Case{100000, true, 100000, 100096},
                        Case{0, true, 1024, 1024}}) {
    auto m = Model::load(path, k.n_ctx);
    const Longrope& lr = m->config().longrope;
    EXPECT_EQ(lr.factors, k.is_long ? LongropeFactors::long_factors : LongropeFactors::short_factors) << k.n_ctx;
    EXPECT_EQ(lr.n_ctx, k.compared);
    EXPECT_EQ(lr.n_ctx_compared, k.rounded);
    EXPECT_EQ(lr.n_ctx_given, k.n_ctx > 0);
    EXPECT_EQ(lr.n_ctx_orig, 256);
    const std::vector<float>& want = k.is_long ? spec.rope_factors_long : spec.rope_factors_short;
    const VectorWeight& f = m->weights().rope_freqs;
    ASSERT_EQ(f.n, 8);
    for (int j = 0; j < 8; ++j) EXPECT_EQ(f.data[j], want[j]) << k.n_ctx << " pair " << j;
    // The attention factor is the file's, whichever is chosen (both tensors are checked whatever
    // the choice: LongropeFactorsMustBeF32OfHalfTheRopeDimAndPositive).
    EXPECT_NEAR(m->config().rope_attn_factor, 1.1180340, 1e-6);
    const std::string say = m->config().longrope_choice();
    EXPECT_TRUE(contains(say, std::string(k.is_long ? "rope_factors_long.weight" : "rope_factors_short.weight") +
                                  ": context " + std::to_string(k.compared)))
        << say;
    EXPECT_TRUE(contains(say, std::string(k.is_long ? " > " : " <= ") + "original context 256")) << say;
    EXPECT_EQ(contains(say, "none given"), k.n_ctx == 0) << say;
    EXPECT_TRUE(contains(m->config().describe(), "rope longrope  " + say)) << m->config().describe();
  }
  // A negative context comes from no user (the commands check -c): a bug, not a bad file.
  EXPECT_THROW(Model::load(path, -1), InternalError);
  // Without rope.scaling.original_context_length llama.cpp compares with context_length.
  test::TinyModelSpec no_orig = spec;
  no_orig.rope_orig_ctx = 0;
  const std::string p2 = test::temp_dir() + "/longrope_no_orig.gguf";
  test::write_tiny_model(p2, no_orig);
  EXPECT_EQ(Model::load(p2, 1024)->config().longrope.factors, LongropeFactors::short_factors);
  EXPECT_EQ(Model::load(p2, 1025)->config().longrope.factors, LongropeFactors::long_factors);
  EXPECT_EQ(Model::load(p2, 0)->config().longrope.factors, LongropeFactors::short_factors);
  // An original context that is no multiple of 256 (300): llama.cpp's -c 280 is 512 > 300, long;
  // -c 256 stays 256, short.
  test::TinyModelSpec odd = spec;
  odd.rope_orig_ctx = 300;
  const std::string p3 = test::temp_dir() + "/longrope_orig_300.gguf";
  test::write_tiny_model(p3, odd);
  EXPECT_EQ(Model::load(p3, 256)->config().longrope.factors, LongropeFactors::short_factors);
  const auto m280 = Model::load(p3, 280);
  EXPECT_EQ(m280->config().longrope.factors, LongropeFactors::long_factors);
  EXPECT_EQ(m280->config().longrope.n_ctx_compared, 512);
  EXPECT_TRUE(contains(m280->config().longrope_choice(),
                       "rope_factors_long.weight: context 280, 512 as llama.cpp rounds it up > original context 300"))
      << m280->config().longrope_choice();
}

// llama.cpp does not apply llama.attention.sliding_window: mpkv keeps every layer global.
TEST(LoadRefusals, LlamaSlidingWindowIsNotApplied) {
  test::TinyModelSpec spec;
  spec.sliding_window = 4096;
  auto m = test::load_tiny_model("llama_window_key", spec);
  EXPECT_EQ(m->config().unapplied_sliding_window, 4096);
  EXPECT_TRUE(m->config().kv_dims().window.empty());
  for (int l = 0; l < m->config().n_layer; ++l) EXPECT_EQ(m->config().attn(l).window, 0);
}

}  // namespace
}  // namespace mpkv

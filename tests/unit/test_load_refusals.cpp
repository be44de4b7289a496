// What Model::load refuses, and that the error names the key or tensor that stops it
// (docs/models.md): RoPE scaling types mpkv does not run, an unknown one, an attention factor,
// bad rope_freqs.weight, and any tensor the architecture does not use. Also what it accepts: the
// scaling keys as llama.cpp reads them (absent type = linear, none ignores the factor).
#include <gtest/gtest.h>

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

TEST(LoadRefusals, YarnAndLongropeAreRefusedNamingTheKeyAndValue) {
  for (const std::string type : {"yarn", "longrope"}) {
    test::TinyModelSpec spec;
    spec.rope_scaling_type = type;
    spec.rope_scaling_factor = 4.0f;
    const std::string e = load_error("refuse_" + type, spec);
    EXPECT_TRUE(contains(e, "llama.rope.scaling.type = '" + type + "'")) << e;
    EXPECT_TRUE(contains(e, "does not support")) << e;
  }
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

TEST(LoadRefusals, AttentionFactorOtherThanOneIsRefused) {
  test::TinyModelSpec spec;
  spec.rope_attn_factor = 1.0f;
  EXPECT_EQ(load_error("attn_factor_one", spec), "");
  spec.rope_attn_factor = 0.5f;
  const std::string e = load_error("attn_factor_half", spec);
  EXPECT_TRUE(contains(e, "llama.rope.scaling.attn_factor = 0.5")) << e;
}

}  // namespace
}  // namespace mpkv

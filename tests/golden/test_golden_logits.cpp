// mpkv's logits against llama.cpp's on the same GGUF, f16 KV cache: SmolLM2-135M-Instruct Q4_1
// (llama) and Gemma 3 270M Q4_K_M (gemma3). The golden files come from scripts/make_golden.sh
// (llama-cpp-python, one batch) and hold llama.cpp's top-20 logits per position together with
// the token ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "golden/golden_compare.h"
#include "test_support.h"

namespace mpkv {
namespace {
using golden::check_model;


TEST(GoldenLogits, SmolLM2MatchesLlamaCpp) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "real model absent (scripts/get_model.sh fetches it)";
  check_model(path, "smollm2_logits.json", golden::kSmolLM2Bounds, SIZE_MAX);
}

// Gemma 3 270M Q4_K_M against llama.cpp on 640 fixed ids (BOS 2, a block of 160 random ids
// repeated), longer than the 512-position sliding window of its local layers. Same sources of
// difference as SmolLM2 (llama.cpp's 8-bit activations) through 18 layers, with logits spanning
// about 80 units (top-1 from -47 to +31). Measured: max 2.90 / mean 0.33, prefill and decode alike
// (bit-identical rows), 0 top-1 mismatches in 547 confident positions. The max comes from rows whose
// logits are all strongly negative (position 23: the top 20 between -34 and -32), shifted together
// by about 2.8 (a near-uniform shift, which leaves the probabilities alone); elsewhere the
// differences are below 1. A real defect is far larger: every layer global (no sliding window)
// gave max 25.3 / mean 0.89 and 32 top-1 mismatches, all past position 512. The bounds leave 1.5x
// headroom; decode runs every position, so the decode path crosses the window too.
constexpr double kGemmaMaxLogitDiff = 4.5;
constexpr double kGemmaMeanLogitDiff = 0.5;
constexpr size_t kGemmaDecodePositions = 640;
TEST(GoldenLogits, Gemma3MatchesLlamaCpp) {
  const std::string path = test::source_path("models/gemma-3-270m-q4_k_m.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "Gemma 3 270M absent (scripts/get_model.sh gemma3-270m fetches it)";
  check_model(path, "gemma3_logits.json", {kGemmaMaxLogitDiff, kGemmaMeanLogitDiff}, kGemmaDecodePositions);
}

// The architectures and RoPE variants without a real model here (docs/models.md): tiny random-weight
// GGUFs of tests/fixtures (test::tiny_variant_spec), committed in tests/golden/archs/ with
// llama.cpp's logits on 64 fixed ids, made by scripts/make_arch_golden.sh (the pinned llama.cpp
// through its C API, bench/peer/peer_logits.cpp). The SmolLM2 bounds: these models have 2 layers and
// logits spanning about 30 units. Measured: max 0.28 - 0.46, mean 0.060 - 0.069, prefill and decode
// alike, 0 top-1 mismatches of 64 confident positions; the feature broken in mpkv (YaRN off, the
// attention factor ignored, phi3's ffn_up halves swapped, the llama window applied) gives max 6.7 -
// 28 (docs/models.md, "Checks"). llama_freq_factors is the golden that sees rope_freqs.weight (every
// pair's factor in [1.5, 8), where Llama 3.x's differ from 1 only on pairs too slow for 64
// positions): max 0.37 / mean 0.065; with the factors ignored in mpkv's forward (layer_rope given
// no factors) max 9.52 / mean 1.71, 7.9x the max bound.
//
// mpkv is loaded for the context llama.cpp was created with (the golden's n_ctx, peer_logits'
// per-sequence context; goldens older than that field were made at 256, the tiny models'
// context_length, which Model::load's 0 stands for), since phi3's longrope factors are chosen by it.
// phi3_longrope_short / _long (llama.cpp at n_ctx 256 / 512, original context 256: the short / the
// long factors): max 0.41 / 0.32, mean 0.068 / 0.065; with the factors ignored in mpkv's forward
// (layer_rope given no factors) max 7.95 / 15.7, mean 1.23 / 2.24 (6.6x / 13x the max bound), with
// the attention factor ignored (1 instead of 1.118) max 3.18 / 3.71, mean 0.60 / 0.63.
class GoldenArchs : public ::testing::TestWithParam<std::string> {};

std::unique_ptr<Model> load_for_golden(const std::string& variant, const nlohmann::json& g) {
  const std::string path = test::source_path("tests/golden/archs/" + variant + ".gguf");
  EXPECT_TRUE(std::filesystem::exists(path)) << path << " missing; run scripts/make_arch_golden.sh";
  return Model::load(path, g.value("n_ctx", 0));
}

TEST_P(GoldenArchs, MatchLlamaCpp) {
  const std::string v = GetParam();
  const nlohmann::json g = golden::load_golden("archs/" + v + "_logits.json");
  check_model(*load_for_golden(v, g), g, golden::kSmolLM2Bounds, SIZE_MAX);
}

INSTANTIATE_TEST_SUITE_P(Archs, GoldenArchs,
                         ::testing::Values("llama_yarn", "qwen2_yarn", "llama_attn_factor", "phi3", "llama_window",
                                           "llama_freq_factors", "phi3_longrope_short", "phi3_longrope_long"));

// The longrope goldens see the choice: each was made at the context its variant runs with, mpkv
// loaded for that context chooses the tensor llama.cpp's rule names (the variant's), and mpkv
// loaded for the other side of the original context (256) applies the other tensor and misses
// llama.cpp's logits by several times the bound: measured max 12.8 / 13.7, mean 1.98 / 1.98 (the
// short / the long golden; 10.7x / 11.4x the max bound).
TEST(GoldenArchs, LongropeChoiceIsTheOneLlamaCppMade) {
  struct Case { std::string variant; int n_ctx, other_n_ctx; LongropeFactors chosen; };
  for (const Case& k : {Case{"phi3_longrope_short", 256, 512, LongropeFactors::short_factors},
                        Case{"phi3_longrope_long", 512, 256, LongropeFactors::long_factors}}) {
    const nlohmann::json g = golden::load_golden("archs/" + k.variant + "_logits.json");
    ASSERT_EQ(g.value("n_ctx", 0), k.n_ctx) << k.variant << ": the golden was made at another context";
    const auto model = load_for_golden(k.variant, g);
    EXPECT_EQ(model->config().longrope.factors, k.chosen) << k.variant;
    const auto other = Model::load(test::source_path("tests/golden/archs/" + k.variant + ".gguf"), k.other_n_ctx);
    ASSERT_NE(other->config().longrope.factors, k.chosen);
    const std::vector<int32_t> toks = g["tokens"].get<std::vector<int32_t>>();
    const golden::Diff d = golden::compare(g, golden::run_logits(*other, toks, false, toks.size()), other->config().n_vocab);
    std::printf("%s with the other factors: max |dlogit| %.4f, mean %.4f, top-1 mismatches %d of %d\n", k.variant.c_str(),
                d.max_abs, d.mean_abs, d.top1_mismatch, d.compared_top1);
    EXPECT_GT(d.max_abs, 3 * golden::kSmolLM2Bounds.max_abs) << k.variant;
  }
}

}  // namespace
}  // namespace mpkv

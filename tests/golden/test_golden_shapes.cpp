// mpkv against llama.cpp at real model sizes: GGUFs with the exact metadata and tensor shapes of
// Llama-3.2-1B (llama, rope_freqs), Qwen2.5-1.5B (qwen2, QKV biases) and Qwen3-1.7B (qwen3, q/k
// norms), the real tokenizers, and random Q8_0 weights from a fixed seed (scripts/make_shape_gguf.sh
// writes them into .shapes/, byte-identical on every run; docs/models.md, "Real shapes"). The
// golden files (scripts/make_golden.sh SHAPE: the pinned llama.cpp tree, bench/peer/peer_logits.cpp;
// the older Q8_0 files llama-cpp-python 0.3.36, each file says which) hold llama.cpp's top-20 logits
// at 64 fixed ids and its greedy 32-token continuation of a fixed prompt. Checked here: the logits
// within bounds (below: SmolLM2's mean bound, a wider max), prefill and decode, the prompt tokenized
// to llama.cpp's ids, and the 32 greedy tokens identical (llama.cpp's ties excepted, check_greedy).
// Q4_K_M files (the pinned tree's llama-quantize, by script only) are checked when present, the
// Llama-3.2-1B and Qwen3-1.7B ones against the exact network (golden_compare.h, Judge).
#include <gtest/gtest.h>

#include <filesystem>

#include "golden/golden_compare.h"
#include "tokenizer/tokenizer.h"

namespace mpkv {
namespace {

// mpkv's greedy continuation of the golden's prompt (prefill, then one decode step per token,
// f16 cache), beside llama.cpp's; the prompt's ids must be llama.cpp's first. At a step where
// llama.cpp's own top-1 margin is within golden::kTop1Margin (a tie, which either engine's rounding
// may break either way) the token is not compared and llama.cpp's is fed on, so one tie does not
// end the check; every other step must give llama.cpp's token.
void check_greedy(const Model& model, const nlohmann::json& greedy) {
  const Tokenizer tok = Tokenizer::from_gguf(model.gguf());
  const std::string prompt = greedy["prompt"].get<std::string>();
  const std::vector<int32_t> ids = tok.encode(prompt);
  ASSERT_EQ(test::ids_text(ids), test::ids_text(greedy["prompt_ids"].get<std::vector<int32_t>>()))
      << "mpkv tokenizes '" << prompt << "' differently from llama.cpp";
  const std::vector<int32_t> want = greedy["tokens"].get<std::vector<int32_t>>();
  const std::vector<double> margins = greedy["margins"].get<std::vector<double>>();
  ASSERT_EQ(margins.size(), want.size());
  Forward fwd(model);
  F16KvCache cache(model.config().kv_dims());
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], (int)i, 0, i + 1 == ids.size()});
  std::vector<float> logits;
  size_t same = 0, ties = 0, ties_same = 0;
  for (size_t step = 0; step < want.size(); ++step) {
    fwd.run(cache, batch, logits);
    const int32_t best = (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (margins[step] <= golden::kTop1Margin) {
      ties++, ties_same += best == want[step];
    } else if (best == want[step]) {
      same++;
    } else {
      ADD_FAILURE() << "greedy token " << step << ": mpkv " << best << ", llama.cpp " << want[step]
                    << " (llama.cpp's margin over its runner-up there: " << margins[step] << ")";
      break;
    }
    batch = {{want[step], (int)(ids.size() + step), 0, true}};
  }
  std::printf("greedy: %zu of %zu confident tokens identical; %zu ties of llama.cpp (margin <= %.1f) not compared, "
              "%zu of them identical; llama.cpp's tokens: %s\n",
              same, want.size() - ties, ties, golden::kTop1Margin, ties_same, test::ids_text(want).c_str());
}

// The bounds: the mean is SmolLM2's (0.3); the max is not. Measured on the Llama-3.2-1B shape:
// prefill max 1.61 / mean 0.25, decode (16 positions) 0.99 / 0.22, 0 top-1 mismatches in 56 and
// 15 confident positions (logits with a top-1 near +28 over a spread of 2.5): the prefill max is
// 1.34x SmolLM2's 1.2 bound, a goal missed (docs/models.md). The max bound here is 1.5x the
// measured prefill max. What this does NOT catch: rope_freqs.weight set to 1 (Llama 3's scaling
// dropped) gave max 1.23 / mean 0.27 and passed, because the factors only change pairs whose
// wavelength exceeds 2048 positions, which barely turn within 64 positions; catching that needs
// golden positions in the thousands (not done; the rotation with factors is checked against the
// double-precision reference in test_forward_reference). What it does catch: blk.8.ffn_norm.weight
// doubled gave prefill max 30.6 / mean 6.09, 44 of 56 top-1 mismatches, greedy wrong at token 0.
constexpr golden::Bounds kShapeBounds{2.4, golden::kSmolLM2Bounds.mean_abs};

// Prefill compares all 64 golden positions; decode (the matrix-vector kernels, one token per step)
// the first 16, to keep the test short on 2 cores: the greedy check below decodes 32 more steps.
constexpr size_t kDecodePositions = 16;

// The tie rule of golden_compare.h can fail: a flip where llama.cpp is sure counts, unless the
// exact network's own margin says tie; a flip where both are sure still counts.
TEST(GoldenShapes, OnlyTheExactNetworksTiesAreSkipped) {
  const nlohmann::json g = nlohmann::json::parse(R"({"positions": [
      {"ids": [0, 1, 2], "logits": [10.0, 9.0, 1.0]}, {"ids": [0, 1, 2], "logits": [10.0, 9.0, 1.0]}]})");
  const nlohmann::json ref = nlohmann::json::parse(R"({"positions": [
      {"ids": [1, 0, 2], "logits": [9.6, 9.5, 1.0]}, {"ids": [0, 1, 2], "logits": [11.0, 9.0, 1.0]}]})");
  const std::vector<float> mpkv = {9.5f, 9.6f, 1.0f, 9.5f, 9.6f, 1.0f};  // token 1 first at both
  const golden::Diff plain = golden::compare(g, mpkv, 3), with_ref = golden::compare(g, mpkv, 3, &ref);
  EXPECT_EQ(plain.compared_top1, 2);
  EXPECT_EQ(plain.top1_mismatch, 2);
  EXPECT_EQ(with_ref.compared_top1, 1);
  EXPECT_EQ(with_ref.top1_mismatch, 1);
  EXPECT_EQ(with_ref.ref_ties, 1);
}

void check_shape(const std::string& shape, const std::string& type, golden::Judge judge = golden::Judge::llama_cpp) {
  const std::string file = shape + "." + type;
  const std::string path = test::source_path(".shapes/" + file + ".gguf");
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " absent (scripts/make_shape_gguf.sh " << shape << " writes the Q8_0 file; "
                 << "scripts/make_golden.sh " << shape << " the Q4_K_M one)";
  const nlohmann::json g = golden::load_golden("shapes/" + file + ".json");
  // The exact network's logits, where committed (golden_compare.h, kTop1Margin: its ties are not compared).
  const std::string ref_file = "shapes/" + file + ".reference.json";
  const bool has_ref = std::filesystem::exists(test::source_path("tests/golden/" + ref_file));
  const nlohmann::json ref = has_ref ? golden::load_golden(ref_file) : nlohmann::json();
  auto model = Model::load(path);
  golden::check_model(*model, g, kShapeBounds, kDecodePositions, has_ref ? &ref : nullptr, judge);
  check_greedy(*model, g["greedy"]);
}

TEST(GoldenShapes, Llama32_1B_Q8_0) { check_shape("llama-3.2-1b", "Q8_0"); }
// Measured on the Qwen3-1.7B shape: prefill max 1.26 / mean 0.21, decode 0.96 / 0.19, greedy 32 of
// 32 identical. Its one top-1 mismatch (position 7, in prefill and decode) is a tie of the network
// itself: llama.cpp has 133757 first by 0.566, the exact double-precision forward has 89901 first by
// 0.020, and mpkv picks 89901; over the 64 positions llama.cpp and mpkv are equally far from the exact
// logits (max 1.14 / mean 0.207 and 1.06 / 0.209). So its reference file
// (qwen3-1.7b.Q8_0.reference.json) is committed and the exact network's ties are not compared
// (golden_compare.h, kTop1Margin); docs/models.md has the table.
TEST(GoldenShapes, Qwen3_1_7B_Q8_0) { check_shape("qwen3-1.7b", "Q8_0"); }
// Measured: prefill max 0.70 / mean 0.15, decode 0.70 / 0.17, 0 top-1 mismatches in 57 and 14
// confident positions, greedy 32 of 32 identical: within SmolLM2's bounds. Runs where the file is
// (scripts/make_shape_gguf.sh qwen2.5-1.5b; scripts/test.sh writes the three Q8_0 shapes).
TEST(GoldenShapes, Qwen25_1_5B_Q8_0) { check_shape("qwen2.5-1.5b", "Q8_0"); }
// Q4_K_M: files made from the Q8_0 ones by the pinned tree's llama-quantize and goldens from the
// pinned tree, both by scripts/make_golden.sh SHAPE only; skipped where the file is absent (CI).
// Measured: docs/models.md, "Against llama.cpp on the shapes".
// Judged against the exact network (golden::Judge::exact_network; the reference file by
// build/shape_reference): against llama.cpp alone it misses SmolLM2's mean bound (prefill max 2.41 /
// mean 0.44, decode 2.07 / 0.38), but llama.cpp is the farther engine from the exact logits (max 2.19
// / mean 0.384; mpkv 1.58 / 0.273, within the bounds), and the top-1 flips against llama.cpp are
// ties of the exact network. Greedy: llama.cpp's first token leads by 0.14 (a tie, not compared);
// the other 31 are identical. With the Q8_0 file put in the Q4_K_M one's place (the weights before
// llama-quantize) this test failed: max 17.8 / mean 3.27 against the exact network, 28 flips.
TEST(GoldenShapes, Llama32_1B_Q4_K_M) { check_shape("llama-3.2-1b", "Q4_K_M", golden::Judge::exact_network); }
// Measured: prefill max 1.06 / mean 0.23, decode 1.06 / 0.25, 0 top-1 mismatches in 55 and 8
// confident positions, greedy 32 of 32 identical.
TEST(GoldenShapes, Qwen25_1_5B_Q4_K_M) { check_shape("qwen2.5-1.5b", "Q4_K_M"); }
// Against llama.cpp alone it misses the mean bound only (prefill max 2.03 / mean 0.34, decode 1.39
// / 0.31); against the exact network mpkv is within the bounds (1.22 / 0.204, llama.cpp 1.60 / 0.278),
// 0 flips, greedy 32 of 32 identical. So it is judged against the exact network too.
TEST(GoldenShapes, Qwen3_1_7B_Q4_K_M) { check_shape("qwen3-1.7b", "Q4_K_M", golden::Judge::exact_network); }

}  // namespace
}  // namespace mpkv

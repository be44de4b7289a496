// Tokenizer of the real default model (SmolLM2-135M-Instruct): ids against llama.cpp, round trip
// over WikiText-2, special ids and chat prompt. Skipped when the model file is absent.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "gguf/gguf_reader.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace mpkv {
namespace {

using Ids = std::vector<int32_t>;

class TokenizerModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::default_model_path();
    if (path.empty()) return;
    GgufReader g(path);
    tok_ = new Tokenizer(Tokenizer::from_gguf(g));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "default model absent (set MPKV_MODEL or put it under models/)";
  }
  static Tokenizer* tok_;
};
Tokenizer* TokenizerModel::tok_ = nullptr;

TEST_F(TokenizerModel, Metadata) {
  EXPECT_EQ(tok_->n_vocab(), 49152);
  EXPECT_EQ(tok_->pre_name(), "smollm");
  EXPECT_EQ(tok_->bos(), 1);
  EXPECT_EQ(tok_->eos(), 2);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_TRUE(tok_->is_end_of_generation(2));   // <|im_end|> (eos)
  EXPECT_TRUE(tok_->is_end_of_generation(0));   // <|endoftext|>
  EXPECT_FALSE(tok_->is_end_of_generation(1));  // <|im_start|>
  EXPECT_FALSE(tok_->is_end_of_generation(504));
}

TEST_F(TokenizerModel, KnownPrompts) {
  // Expected ids from llama.cpp's tokenizer on this GGUF (no BOS: add_bos_token is false).
  EXPECT_EQ(tok_->encode("The capital of France is"), (Ids{504, 3575, 282, 4649, 314}));
  EXPECT_EQ(tok_->encode("Hello, we can use"), (Ids{19556, 28, 392, 416, 722}));
}

TEST_F(TokenizerModel, SpecialTokensParsedOrNot) {
  const Ids with = tok_->encode("<|im_start|>user\nhi<|im_end|>", false, true);
  ASSERT_GE(with.size(), 3u);
  EXPECT_EQ(with.front(), 1);
  EXPECT_EQ(with.back(), 2);
  const Ids without = tok_->encode("<|im_start|>", false, false);
  EXPECT_GT(without.size(), 1u);  // spelled out as ordinary text
  EXPECT_EQ(tok_->decode(without), "<|im_start|>");
}

TEST_F(TokenizerModel, ChatPromptHasDefaultSystem) {
  EXPECT_EQ(tok_->format_chat({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(TokenizerModel, WikiTextRoundTrip) {
  const std::string path = test::source_path("../shared/data/wikitext-2/test.txt");
  std::ifstream in(path, std::ios::binary);
  if (!in) GTEST_SKIP() << "WikiText-2 test file absent: " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  ASSERT_GT(text.size(), 1000000u);
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = tok_->encode(text, false);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("encoded %zu bytes into %zu tokens in %.3f s\n", text.size(), ids.size(), secs);
  EXPECT_EQ(tok_->decode(ids), text);
}

}  // namespace
}  // namespace mpkv

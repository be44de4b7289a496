// Tokenizer of the real default model (SmolLM2-135M-Instruct): ids against llama.cpp, round trip
// over WikiText-2, special ids and chat prompt. Skipped when the model file is absent.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "gguf/gguf_reader.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

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

// Expected ids from llama.cpp through llama-cpp-python 0.3.36:
//   llm = llama_cpp.Llama(model_path=<model>, vocab_only=True)
//   llm.tokenize(text_bytes, add_bos=False, special=<parse_special>)
struct LlamaCppCase {
  const char* text;
  bool parse_special;
  Ids ids;
};

TEST_F(TokenizerModel, MatchesLlamaCppOnTrickyStrings) {
  const std::vector<LlamaCppCase> cases = {
      {"12345", true, {33, 34, 35, 36, 37}},
      {"don't I'll", true, {12420, 982, 339, 3060}},
      {"h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x99\x82", true,  // "héllo 世界 🙂"
       {88, 2756, 31394, 216, 7906, 240, 178, 239, 230, 47526}},
      {"a  b   c\n\n\nd \t e  \n", true, {81, 216, 278, 256, 265, 1116, 198, 84, 216, 197, 297, 32057}},
      {"<|im_start|>user\nhi<|im_end|>", true, {1, 4093, 198, 6004, 2}},
      {"<|im_start|>user\nhi<|im_end|>", false,
       {44, 108, 306, 79, 3738, 108, 46, 4093, 198, 6004, 44, 108, 306, 79, 486, 108, 46}},
      {"DON'T WE'LL they're", true, {52, 2154, 23, 68, 26587, 23, 16421, 502, 2316}},
      {"   leading and trailing   ", true, {256, 2899, 284, 35079, 333}},
      {"x\r\ny\ttab $100.50 & 3.14% 2024-01-01", true,
       {104, 201, 198, 105, 197, 15999, 1885, 33, 32, 32, 30, 37, 32, 1456, 216, 35, 30, 33, 36, 21, 216, 34, 32, 34,
        36, 29, 32, 33, 29, 32, 33}},
      // "naïve café — “quotes” ｆｕｌｌ<U+00A0>nbsp <U+0085>nel 👩‍👩‍👧 日本語"
      {"na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE2\x80\x9Cquotes\xE2\x80\x9D \xEF\xBD\x86\xEF\xBD\x95\xEF\xBD\x8C"
       "\xEF\xBD\x8C\xC2\xA0nbsp \xC2\x85nel \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
       "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
       true,
       {3546, 46494, 37366, 1841, 619, 385, 2346, 573, 216, 186, 138, 224, 186, 138, 239, 186, 138, 230, 186, 138, 230,
        15442, 94, 32093, 216, 141, 223, 5824, 15107, 235, 119, 321, 231, 10813, 235, 119, 321, 231, 10813, 235, 117,
        17097, 241, 115, 40993, 179, 120, 248}},
      // Invalid UTF-8: each bad byte becomes U+FFFD (24211), as in llama.cpp.
      {"a\xFF" "b\xE4\xB8", true, {81, 24211, 82, 24211, 24211}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(tok_->encode(c.text, false, c.parse_special), c.ids) << "text: " << c.text;
  }
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

TEST_F(TokenizerModel, RandomTextMatchesLlamaCppAndRoundTrips) {
  // 300 random concatenations of awkward pieces (std::mt19937 is fully specified, so the strings
  // are the same everywhere). Expected: count and FNV-1a of all ids from llama.cpp, obtained by
  // writing these strings to a file and running llm.tokenize(s, add_bos=False, special=...) on
  // each (see MatchesLlamaCppOnTrickyStrings). Invalid UTF-8 comes back as U+FFFD per bad byte.
  const std::vector<std::string> parts = {"a", "Zq", " ", "  ", "\n", "\t", "\r\n", "7", "2024", "'s", "'LL", "-",
                                          ".", "h\xC3\xA9", "\xE4\xB8\x96", "\xF0\x9F\x99\x82", "\xC2\x85",
                                          "\xC2\xA0", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "\xFF",
                                          "\xE4\xB8", "\x80"};
  std::mt19937 rng(1234);
  std::vector<std::string> texts;
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) text += parts[rng() % parts.size()];
    texts.push_back(text);
  }
  struct Expected {
    bool parse_special;
    size_t n_ids;
    uint64_t fnv;
  };
  for (const Expected& e : {Expected{true, 8003, 0xf12851a28f4a27beull}, Expected{false, 12155, 0x5b96347abc2be96cull}}) {
    Ids all;
    for (const auto& text : texts) {
      const Ids ids = tok_->encode(text, false, e.parse_special);
      EXPECT_EQ(tok_->decode(ids), utf8_sanitize(text));
      all.insert(all.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(all.size(), e.n_ids) << "parse_special " << e.parse_special;
    EXPECT_EQ(test::fnv1a_ids(all), e.fnv) << "parse_special " << e.parse_special;
  }
}

TEST_F(TokenizerModel, ChatPromptHasDefaultSystem) {
  EXPECT_EQ(tok_->format_chat({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(TokenizerModel, WikiTextMatchesLlamaCppAndRoundTrips) {
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
  // Same ids as llama.cpp over the whole file: count and FNV-1a of
  // llm.tokenize(open(test.txt, 'rb').read(), add_bos=False, special=True) (see above).
  EXPECT_EQ(ids.size(), 312144u);
  EXPECT_EQ(test::fnv1a_ids(ids), 0x90781a3639f7d41eull);
  EXPECT_EQ(tok_->decode(ids), text);
}

}  // namespace
}  // namespace mpkv

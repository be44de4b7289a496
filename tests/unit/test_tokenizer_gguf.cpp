// Tokenizer::from_gguf on small in-memory GGUF files: metadata read correctly, unsupported or
// malformed tokenizer metadata rejected with Error.
#include <gtest/gtest.h>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {
namespace {

// The tiny vocabulary of test_tokenizer_bpe.cpp, without the BYTE token:
//   0 <|endoftext|>  1 <|im_start|>  2 <|im_end|>  3 a  4 b  5 c  6 d  7 Ġ  8 1  9 2  10 !
//   11 bc  12 ab  13 abc  14 Ġa  15 aa  16 Ġab  17 cdd  18 Ċ
GgufWriter tiny_writer(const std::string& model = "gpt2", const std::string& pre = "smollm") {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", model);
  if (!pre.empty()) w.set_string("tokenizer.ggml.pre", pre);
  w.set_string_array("tokenizer.ggml.tokens",
                     {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "d", "\xC4\xA0", "1", "2", "!",
                      "bc", "ab", "abc", "\xC4\xA0" "a", "aa", "\xC4\xA0" "ab", "cdd", "\xC4\x8A"});
  std::vector<int32_t> types(19, 1);
  types[0] = types[1] = types[2] = 3;
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges",
                     {"b c", "a b", "a bc", "\xC4\xA0 a", "a a", "\xC4\xA0 ab", "c d", "cd d"});
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  return w;
}

Tokenizer load(const GgufWriter& w) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  GgufReader g(bytes.data(), bytes.size());
  return Tokenizer::from_gguf(g);
}

TEST(TokenizerGguf, ReadsMetadata) {
  GgufWriter w = tiny_writer();
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_string("tokenizer.chat_template",
               "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe kind.<|im_end|>\n' }}{% endif %}");
  const Tokenizer t = load(w);
  EXPECT_EQ(t.n_vocab(), 19);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.encode("abc ab"), (std::vector<int32_t>{1, 13, 16}));
  EXPECT_EQ(t.token_type(2), TokenType::control);
  EXPECT_EQ(t.default_system_prompt(), std::optional<std::string>("Be kind."));
}

TEST(TokenizerGguf, AddBosDefaultsFollowThePreTokenizer) {
  EXPECT_FALSE(load(tiny_writer("gpt2", "smollm")).add_bos());
  EXPECT_TRUE(load(tiny_writer("gpt2", "llama-bpe")).add_bos());  // llama.cpp's llama3 default
}

TEST(TokenizerGguf, RejectsUnsupportedOrMalformed) {
  EXPECT_THROW(load(tiny_writer("llama")), Error);              // SentencePiece model
  EXPECT_THROW(load(tiny_writer("gpt2", "no-such-pre")), Error);
  EXPECT_THROW(load(tiny_writer("gpt2", "")), Error);           // no tokenizer.ggml.pre
  GgufWriter w = tiny_writer();
  w.set_i32("tokenizer.ggml.tokens", 5);                        // not an array
  EXPECT_THROW(load(w), Error);
  GgufWriter w2 = tiny_writer();
  w2.set_i32_array("tokenizer.ggml.token_type", {1, 1});        // too short
  EXPECT_THROW(load(w2), Error);
  GgufWriter w3 = tiny_writer();
  w3.set_u32("tokenizer.ggml.eos_token_id", 100);               // outside the vocabulary
  EXPECT_THROW(load(w3), Error);
  try {
    load(tiny_writer("llama"));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported tokenizer model 'llama'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpkv

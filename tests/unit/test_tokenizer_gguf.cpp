// Tokenizer::from_gguf on small in-memory GGUF files (BPE and SentencePiece): metadata read
// correctly, unsupported or malformed tokenizer metadata rejected with Error.
#include <gtest/gtest.h>

#include "gguf/gguf_reader.h"
#include "support/gguf_writer.h"
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
  EXPECT_THROW(load(tiny_writer("t5")), Error);                 // Unigram model
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
    load(tiny_writer("t5"));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported tokenizer model 't5'"), std::string::npos) << e.what();
  }
}

// A SentencePiece-style ("llama") vocabulary:
//   0 <unk>  1 <s>  2 </s>  3 ▁  4 a  5 b  6 ▁a  7 ab  8 ▁ab  9 <0x0A>
GgufWriter spm_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens",
                     {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab",
                      "\xE2\x96\x81" "ab", "<0x0A>"});
  w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -5, -1, -2, -3, -4, -6, 0});
  w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1, 1, 6});
  return w;
}

TEST(TokenizerGguf, ReadsSentencePieceMetadataWithLlamaCppDefaults) {
  const Tokenizer t = load(spm_writer());
  EXPECT_EQ(t.kind(), TokenizerKind::spm);
  EXPECT_EQ(t.bos(), 1);  // absent keys: bos 1, eos 2, unk 0, add_bos and add_space_prefix true
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.unk(), 0);
  EXPECT_TRUE(t.add_bos());
  EXPECT_TRUE(t.add_space_prefix());
  EXPECT_EQ(t.pre_name(), "");
  // "▁ab": ▁a (-3) beats ab (-4); then ▁a+b = ▁ab (-6).
  EXPECT_EQ(t.encode("ab\n"), (std::vector<int32_t>{1, 8, 9}));
  EXPECT_EQ(t.decode({8, 9}), " ab\n");

  GgufWriter w = spm_writer();
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_u32("tokenizer.ggml.unknown_token_id", 2);
  const Tokenizer u = load(w);
  EXPECT_FALSE(u.add_space_prefix());
  EXPECT_FALSE(u.add_bos());
  EXPECT_EQ(u.unk(), 2);
  EXPECT_EQ(u.encode("ab"), (std::vector<int32_t>{7}));
}

TEST(TokenizerGguf, RejectsMalformedSentencePieceScores) {
  GgufWriter w = spm_writer();
  w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0});  // too short
  EXPECT_THROW(load(w), Error);
  GgufWriter w2 = spm_writer();
  w2.set_f32("tokenizer.ggml.scores", 1.0f);             // not an array
  EXPECT_THROW(load(w2), Error);
  GgufWriter w3 = spm_writer();
  w3.set_string_array("tokenizer.ggml.scores", std::vector<std::string>(10, "x"));  // not numbers
  EXPECT_THROW(load(w3), Error);
}

}  // namespace
}  // namespace mpkv

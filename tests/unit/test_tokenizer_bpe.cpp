// Synthetic tests of the tokenizer pieces: GPT-2 byte map, UTF-8 repair, pre-tokenizer splits and
// BPE merge order on a tiny hand-made vocabulary. Every expected value is worked out by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace mpkv {
namespace {

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  PreTokenizer p(pre);
  std::vector<std::string> out;
  for (auto v : p.split(text)) out.emplace_back(v);
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerByteMap, KnownImagesAndRoundTrip) {
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_unicode(0x00), 0x100u);
  EXPECT_EQ(byte_to_unicode('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);  // the 68th and last remapped byte
  EXPECT_EQ(byte_to_unicode(0xFF), 0xFFu);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(unicode_to_byte(0x144), -1);
  EXPECT_EQ(unicode_to_byte(' '), -1);  // a space never appears in byte-encoded text
  EXPECT_EQ(bytes_to_unicode_text(" a\n"), "\xC4\xA0" "a" "\xC4\x8A");
}

TEST(TokenizerUtf8, RepairsLikeLlamaCpp) {
  EXPECT_TRUE(utf8_is_valid("h\xC3\xA9llo \xF0\x9F\x99\x82"));
  EXPECT_TRUE(utf8_is_valid("\xEF\xBF\xBD"));             // a real U+FFFD
  EXPECT_FALSE(utf8_is_valid("\xC0\x80"));                // overlong NUL
  EXPECT_FALSE(utf8_is_valid("\xED\xA0\x80"));            // surrogate
  EXPECT_FALSE(utf8_is_valid("a\xE4\xB8"));               // truncated
  EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  // A truncated 3-byte sequence: the lead byte becomes U+FFFD, then the continuation byte too.
  EXPECT_EQ(utf8_sanitize("\xE4\xB8" "x"), "\xEF\xBF\xBD\xEF\xBF\xBD" "x");
  EXPECT_EQ(utf8_sanitize("\xC0\x80"), std::string(1, '\0'));  // overlong re-encoded canonically
}

TEST(TokenizerPreTokenizer, SmollmSplitsDigitsThenGpt2) {
  EXPECT_EQ(split("smollm", "Hello world 123 don't  x\n\ny"),
            (Pieces{"Hello", " world", " ", "1", "2", "3", " don", "'t", " ", " x", "\n", "\n", "y"}));
  // Contractions are case-sensitive in the GPT-2 regex.
  EXPECT_EQ(split("smollm", "DON'T"), (Pieces{"DON", "'", "T"}));
  EXPECT_EQ(split("smollm", "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C!!"),
            (Pieces{"h\xC3\xA9llo", " \xE4\xB8\x96\xE7\x95\x8C", "!!"}));
  // U+0085 (NEL) is White_Space for llama.cpp: "\s+(?!\S)" takes the first, the second is left over.
  EXPECT_EQ(split("smollm", "a\xC2\x85\xC2\x85" "b"), (Pieces{"a", "\xC2\x85", "\xC2\x85", "b"}));
  EXPECT_EQ(split("smollm", "x   "), (Pieces{"x", "   "}));  // trailing run kept whole at the end
}

TEST(TokenizerPreTokenizer, Gpt2KeepsDigitRuns) {
  EXPECT_EQ(split("gpt-2", "Hello world 123 don't  x\n\ny"),
            (Pieces{"Hello", " world", " 123", " don", "'t", " ", " x", "\n", "\n", "y"}));
}

TEST(TokenizerPreTokenizer, Qwen2) {
  EXPECT_EQ(split("qwen2", "Hello world 123 don't  x\n\ny"),
            (Pieces{"Hello", " world", " ", "1", "2", "3", " don", "'t", " ", " x", "\n\n", "y"}));
  EXPECT_EQ(split("qwen2", "DON'T"), (Pieces{"DON", "'T"}));  // case-insensitive contractions
}

TEST(TokenizerPreTokenizer, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(split("llama-bpe", "Hello world 123 don't  x\n\ny"),
            (Pieces{"Hello", " world", " ", "123", " don", "'t", " ", " x", "\n\n", "y"}));
  EXPECT_EQ(split("llama-bpe", "1234567"), (Pieces{"123", "456", "7"}));
}

// qwen35 differs from qwen2 in letting a letter run take combining marks (U+0301 here).
TEST(TokenizerPreTokenizer, Qwen35LettersTakeMarks) {
  EXPECT_EQ(split("qwen2", "e\xCC\x81t"), (Pieces{"e", "\xCC\x81t"}));
  EXPECT_EQ(split("qwen35", "e\xCC\x81t"), (Pieces{"e\xCC\x81t"}));
}

// The multi-regex kinds, one regex after the other on the pieces of the previous one.
TEST(TokenizerPreTokenizer, DeepseekAndFalconRegexSequences) {
  // deepseek-coder: newlines; letter runs; punctuation runs; CJK; each digit.
  EXPECT_EQ(split("deepseek-coder", "def f(x):\n  return 42"),
            (Pieces{"def", " f", "(", "x", "):", "\n", " ", " return", " ", "4", "2"}));
  // deepseek-llm: newlines; cased-script letters (not CJK); ASCII punctuation (digits excluded);
  // trailing whitespace; CJK runs; digit runs.
  EXPECT_EQ(split("deepseek-llm", "Hello \xE4\xB8\x96\xE7\x95\x8C 123!\n"),
            (Pieces{"Hello", " ", "\xE4\xB8\x96\xE7\x95\x8C", " ", "123", "!", "\n"}));
  // falcon: punctuation and $+<=>^~|` runs; the GPT-2 regex; then digits in threes.
  EXPECT_EQ(split("falcon", "x+=1234 'ok'"), (Pieces{"x", "+=", "123", "4", " ", "'", "ok", "'"}));
}

TEST(TokenizerPreTokenizer, UnknownNameThrows) {
  EXPECT_THROW(PreTokenizer("no-such-pre"), Error);
  EXPECT_THROW(pre_tokenizer_spec(""), Error);
}

// Tiny vocabulary. "Ġ" is the image of ' ', "Ċ" of '\n'.
//   id: 0 <|endoftext|>  1 <|im_start|>  2 <|im_end|>  3 a  4 b  5 c  6 d  7 Ġ  8 1  9 2  10 !
//       11 bc  12 ab  13 abc  14 Ġa  15 aa  16 Ġab  17 cdd  18 Ċ  19 <0x41> (BYTE)
// merges by rank: 0 "b c", 1 "a b", 2 "a bc", 3 "Ġ a", 4 "a a", 5 "Ġ ab", 6 "c d" (cd is no
// token), 7 "cd d".
Tokenizer tiny_tokenizer(const std::string& pre = "smollm") {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "d",
                                     "\xC4\xA0", "1", "2", "!", "bc", "ab", "abc", "\xC4\xA0" "a", "aa",
                                     "\xC4\xA0" "ab", "cdd", "\xC4\x8A", "<0x41>"};
  std::vector<TokenType> types(tokens.size(), TokenType::normal);
  types[0] = types[1] = types[2] = TokenType::control;
  types[19] = TokenType::byte;
  std::vector<std::string> merges = {"b c", "a b", "a bc", "\xC4\xA0 a", "a a", "\xC4\xA0 ab", "c d", "cd d"};
  SpecialTokenIds ids;
  ids.bos = 0;
  ids.eos = 0;
  return Tokenizer(tokens, types, merges, pre, ids, /*add_bos=*/false);
}

using Ids = std::vector<int32_t>;

TEST(TokenizerBpe, MergeOrderWorkedByHand) {
  const Tokenizer t = tiny_tokenizer();
  // a b c: "b c" (rank 0) beats "a b" (rank 1), then "a bc" -> abc.
  EXPECT_EQ(t.encode("abc", false), (Ids{13}));
  // Ġ a b: "a b" (1) before "Ġ a" (3); then "Ġ ab" (5).
  EXPECT_EQ(t.encode(" ab", false), (Ids{16}));
  // Ġ a a a: "Ġ a" (3) before "a a" (4) -> Ġa a a; then the remaining "a a" -> Ġa aa.
  EXPECT_EQ(t.encode(" aaa", false), (Ids{14, 15}));
  // a a a: equal ranks merge leftmost first -> aa a.
  EXPECT_EQ(t.encode("aaa", false), (Ids{15, 3}));
  // c d d: "c d" makes cd (not a token), then "cd d" -> cdd.
  EXPECT_EQ(t.encode("cdd", false), (Ids{17}));
  // c d: cd is no token, so it falls back to its bytes.
  EXPECT_EQ(t.encode("cd", false), (Ids{5, 6}));
  EXPECT_EQ(t.encode("dc", false), (Ids{6, 5}));
}

TEST(TokenizerBpe, WholeTextWithDigitsAndSpecials) {
  const Tokenizer t = tiny_tokenizer();
  // smollm: "abc ab aaa " | "1" | "2" | "!" ; then "abc", " ab", " aaa", " ".
  EXPECT_EQ(t.encode("abc ab aaa 12!", false), (Ids{13, 16, 14, 15, 7, 8, 9, 10}));
  EXPECT_EQ(t.encode("<|im_start|>ab<|im_end|>\n", false), (Ids{1, 12, 2, 18}));
  EXPECT_EQ(t.encode("ab", true), (Ids{0, 12}));
  EXPECT_EQ(t.encode("", false), Ids{});
}

TEST(TokenizerBpe, DecodeAndPieces) {
  const Tokenizer t = tiny_tokenizer();
  EXPECT_EQ(t.token_piece(16), " ab");
  EXPECT_EQ(t.token_piece(18), "\n");
  EXPECT_EQ(t.token_piece(19), "A");  // BYTE token <0x41>
  EXPECT_EQ(t.token_piece(1), "<|im_start|>");
  EXPECT_EQ(t.decode({1, 13, 16, 14, 15, 8, 2}), "<|im_start|>abc ab aaa1<|im_end|>");
  const std::string text = "<|im_start|>abc ab aaa 12!\n<|im_end|>";
  EXPECT_EQ(t.decode(t.encode(text, false)), text);
  EXPECT_THROW(t.token_piece(20), Error);
  EXPECT_THROW(t.decode({-1}), Error);
}

TEST(TokenizerBpe, EndOfGeneration) {
  const Tokenizer t = tiny_tokenizer();
  EXPECT_TRUE(t.is_end_of_generation(0));   // eos and <|endoftext|>
  EXPECT_TRUE(t.is_end_of_generation(2));   // <|im_end|>
  EXPECT_FALSE(t.is_end_of_generation(1));  // <|im_start|>
  EXPECT_FALSE(t.is_end_of_generation(13));
  EXPECT_FALSE(t.is_end_of_generation(-5));
}

TEST(TokenizerBpe, BadInputThrows) {
  const std::vector<std::string> merges;
  EXPECT_THROW(Tokenizer({"a", "a"}, {}, merges, "smollm", {}, false), Error);  // duplicate token
  EXPECT_THROW(Tokenizer({"a", "b"}, {TokenType::normal}, merges, "smollm", {}, false), Error);
  EXPECT_THROW(Tokenizer({"a", "b"}, {}, merges, "nope", {}, false), Error);
  EXPECT_THROW(Tokenizer({"a", "b"}, {}, merges, "smollm", {}, /*add_bos=*/true), Error);
  SpecialTokenIds bad;
  bad.eos = 7;
  EXPECT_THROW(Tokenizer({"a", "b"}, {}, merges, "smollm", bad, false), Error);
  EXPECT_THROW(Tokenizer({"a", "b"}, {}, {"ab"}, "smollm", {}, false), Error);  // merge without a space
}

}  // namespace
}  // namespace mpkv

// SentencePiece-style tokenizer (Tokenizer::sentencepiece) on a tiny synthetic vocabulary; every
// expected id list below was worked out by hand from the rules in spm_merges.h / tokenizer.h.
#include <gtest/gtest.h>

#include <cmath>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {
namespace {

using Ids = std::vector<int32_t>;
using TT = TokenType;

// id: text (type, score)
//  0 <unk> (UNKNOWN)  1 <s> (CONTROL)  2 </s> (CONTROL)  3 <u> (USER_DEFINED)
//  4 ▁ (-1)  5 a (-2)  6 b (-3)  7 c (-4)  8 ab (-1.5)  9 bc (-1.5)  10 ▁a (-2.5)  11 abc (-10)
//  12 <0xC3>  13 <0xA9>  14 <0xFF>  15 <0x61> (BYTE)  16 "\n" (USER_DEFINED)
const std::string kSp = "\xE2\x96\x81";

Tokenizer make(bool add_space_prefix, int32_t unk = 0) {
  std::vector<std::string> tokens = {"<unk>", "<s>",   "</s>",     "<u>",      "" + kSp, "a",
                                     "b",     "c",     "ab",       "bc",       kSp + "a", "abc",
                                     "<0xC3>", "<0xA9>", "<0xFF>", "<0x61>",   "\n"};
  std::vector<TT> types = {TT::unknown, TT::control, TT::control, TT::user_defined, TT::normal, TT::normal,
                           TT::normal,  TT::normal,  TT::normal,  TT::normal,       TT::normal, TT::normal,
                           TT::byte,    TT::byte,    TT::byte,    TT::byte,         TT::user_defined};
  std::vector<float> scores = {0, 0, 0, 0, -1, -2, -3, -4, -1.5f, -1.5f, -2.5f, -10, 0, 0, 0, 0, 0};
  return Tokenizer::sentencepiece(std::move(tokens), std::move(types), std::move(scores),
                                  {.bos = 1, .eos = 2, .unk = unk, .pad = -1}, /*add_bos=*/true, add_space_prefix);
}

TEST(TokenizerSpm, HighestScoreMergesFirstAndTiesGoLeft) {
  const Tokenizer t = make(true);
  // "▁abc": ab and bc tie at -1.5, the left one (ab) merges; ▁a is now stale; ab+c -> abc.
  // (bc first would give ▁a + bc = {10, 9}.)
  EXPECT_EQ(t.encode("abc", false), (Ids{4, 11}));
  EXPECT_EQ(make(false).encode("abc", false), (Ids{11}));
  // "▁a▁b": ▁a merges; "▁b" is no token.
  EXPECT_EQ(t.encode("a b", false), (Ids{10, 4, 6}));
  EXPECT_EQ(t.encode("a b", true), (Ids{1, 10, 4, 6}));
  EXPECT_EQ(t.encode("abc"), (Ids{1, 4, 11}));  // add_bos from the tokenizer
}

TEST(TokenizerSpm, CharactersOutsideTheVocabularyFallBackToBytes) {
  const Tokenizer t = make(true);
  EXPECT_EQ(t.encode("\xC3\xA9", false), (Ids{4, 12, 13}));  // é -> <0xC3> <0xA9>
  EXPECT_EQ(t.decode({12, 13}), "\xC3\xA9");
  // No "<0x64>" and no "d" token: the unknown token.
  EXPECT_EQ(t.encode("d", false), (Ids{4, 0}));
  // Without an unknown token that byte is an input error.
  EXPECT_THROW(make(true, -1).encode("d", false), Error);
}

TEST(TokenizerSpm, InvalidUtf8IsSplitByLeadByteAndEmittedAsBytes) {
  // 0xFF announces 4 bytes, so "\xFF" "ab" is one 3-byte symbol (cut at the end); it is no token,
  // so each byte falls back: 0xFF -> <0xFF>, 'a' -> <0x61> (a byte token wins over the text "a"),
  // 'b' -> no <0x62>, so the one-byte token "b".
  EXPECT_EQ(make(false).encode("\xFF" "ab", false), (Ids{14, 15, 6}));
  // A stray continuation byte is a symbol of its own: 0xA9 then "a" merges with nothing.
  EXPECT_EQ(make(false).encode("\xA9" "a", false), (Ids{13, 5}));
}

TEST(TokenizerSpm, SpacePrefixFollowsSpecialTokens) {
  const Tokenizer t = make(true);
  // "<s>" is cut out; the text after it gets a space prefix: "▁a".
  EXPECT_EQ(t.encode("<s>a", false, true), (Ids{1, 10}));
  // Not parsed: "▁<s>a" is plain text, and '<', 's', '>' have no token -> <unk>.
  EXPECT_EQ(t.encode("<s>a", false, false), (Ids{4, 0, 0, 0, 5}));
  // USER_DEFINED tokens are cut out even when special tokens are not parsed; "b" then follows a
  // special token and gets "▁" before it.
  EXPECT_EQ(t.encode("a\nb", false, false), (Ids{10, 16, 4, 6}));
  EXPECT_EQ(t.encode("a<u>", false, false), (Ids{10, 3}));
  EXPECT_EQ(make(false).encode("a\nb", false, false), (Ids{5, 16, 6}));
}

TEST(TokenizerSpm, DecodeTurnsTheSpaceMarkBack) {
  const Tokenizer t = make(true);
  EXPECT_EQ(t.decode({10, 16, 4, 6}), " a\n b");
  EXPECT_EQ(t.decode({1, 10}), "<s> a");  // CONTROL tokens give their text
  EXPECT_EQ(t.token_piece(10), " a");
  EXPECT_EQ(t.find_token(kSp + "a"), 10);
  EXPECT_EQ(t.find_token("zz"), -1);
}

TEST(TokenizerSpm, RejectsMismatchedScores) {
  EXPECT_THROW(Tokenizer::sentencepiece({"a", "b"}, {}, {0.0f}, {}, false, true), Error);
  EXPECT_THROW(Tokenizer::sentencepiece({"a", "b"}, {}, {0.0f, std::nanf("")}, {}, false, true), Error);
}

}  // namespace
}  // namespace mpkv

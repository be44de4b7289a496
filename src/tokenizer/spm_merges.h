// SentencePiece-style (llama.cpp's "llama" / SPM tokenizer model) score-driven merging of one
// stretch of text, as llama.cpp's llm_tokenizer_spm_session does it (docs/tokenizer.md):
//   1. the text (spaces already replaced by U+2581 "▁") starts as one symbol per UTF-8 character;
//      a character's length comes from its first byte alone (0xC_/0xD_ -> 2, 0xE_ -> 3, 0xF_ -> 4,
//      anything else 1, cut short at the end of the text), so invalid UTF-8 is not repaired;
//   2. every adjacent pair whose concatenated text is a vocabulary token (of any type) is a
//      candidate, scored by that token's score; the best candidate is merged (highest score, then
//      the leftmost), and the new symbol's pairs with its neighbours become candidates; repeat
//      until none is left;
//   3. each final symbol that is a token is emitted as that token; any other symbol (a single
//      character outside the vocabulary) is emitted byte by byte as byte-fallback tokens "<0xXX>",
//      or, when the vocabulary has no such token, the one-byte token with that text.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mpkv {

class SpmMerges {
 public:
  // tokens: vocabulary texts (id = index), already unique. scores: one per token.
  // unk_id: emitted for a byte that has no token (-1: such a byte is an Error at encode time).
  // Throws Error when scores and tokens differ in length or a score is NaN.
  SpmMerges(const std::vector<std::string>& tokens, std::vector<float> scores, int32_t unk_id);

  // Vocabulary id of an exact token text, or -1.
  int32_t find_token(std::string_view text) const;
  float score(int32_t id) const { return scores_[id]; }
  // The token a raw byte falls back to, or -1 (see the header comment).
  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }

  // Segments text (spaces already escaped to U+2581) and appends the token ids to out.
  // Throws Error for a byte that has neither a byte token nor unk_id to fall back to, or a text of
  // 2 GiB or more.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  void emit_bytes(std::string_view symbol, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;  // text -> id
  std::vector<float> scores_;
  std::array<int32_t, 256> byte_token_{};
  int32_t unk_id_ = -1;
};

}  // namespace mpkv

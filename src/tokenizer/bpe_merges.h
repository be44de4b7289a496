// Byte-level BPE over one pre-tokenized word, as llama.cpp's llm_tokenizer_bpe_session does it:
// the word's bytes start as one symbol each (a symbol's text is the GPT-2 byte-to-unicode image),
// then the adjacent pair with the lowest merge rank is merged, leftmost first on ties, until no
// adjacent pair has a rank. Each final symbol becomes its vocabulary token.
//
// Symbols are interned strings: ids below n_vocab are the vocabulary tokens; strings that occur
// only in the merge list (a merge whose parts or result are not tokens) get ids from n_vocab up,
// so merging works on integer pairs: (left id, right id) -> (rank, result id).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mpkv {

class BpeMerges {
 public:
  // tokens: vocabulary texts (id = index), already unique. merges: "left right" in rank order
  // (rank = index); a line is split at its first space after the first byte. Duplicate pairs keep
  // their first rank. Throws Error for a merge line with no separating space.
  BpeMerges(const std::vector<std::string>& tokens, const std::vector<std::string>& merges);

  int32_t n_vocab() const { return n_vocab_; }
  size_t n_merges() const { return merge_table_.size(); }

  // Vocabulary id of an exact token text, or -1.
  int32_t find_token(std::string_view text) const;

  // Encodes one word (raw bytes) and appends its token ids to out.
  // ignore_merges: when the whole word (byte-encoded) is a token, emit it as is (llama3 rule).
  // A final symbol that is not a vocabulary token is emitted byte by byte; a byte whose image is
  // not a token becomes unk_id, or is dropped when unk_id < 0 (llama.cpp drops it).
  void encode_word(std::string_view word, bool ignore_merges, int32_t unk_id, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  int32_t intern(const std::string& text);

  int32_t n_vocab_ = 0;
  std::unordered_map<std::string, int32_t> symbol_ids_;  // token texts and merge-only strings
  int32_t n_symbols_ = 0;
  std::array<int32_t, 256> byte_symbol_{};                // symbol id of each byte's image
  std::unordered_map<uint64_t, Merge> merge_table_;
};

}  // namespace mpkv

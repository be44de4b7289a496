#include "tokenizer/spm_merges.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>

#include "util/error.h"

namespace mpkv {
namespace {

// Bytes of the UTF-8 character that starts with byte c, judged by its high nibble only (so a
// stray continuation byte is a character of its own and a bad lead byte swallows what follows).
size_t char_length(char c) {
  static constexpr uint8_t kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[static_cast<uint8_t>(c) >> 4];
}

// A stretch of the text; len == 0 once it has been merged into its left neighbour.
struct Symbol {
  uint32_t offset, len;
  int32_t prev, next;  // neighbours in the chain, -1 at the ends
};

// Merging symbols left and right (adjacent) would make a token of this score and byte size.
struct Candidate {
  float score;
  int32_t left, right;
  uint32_t size;
};
// Priority order: higher score first, then the leftmost pair.
struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmMerges::SpmMerges(const std::vector<std::string>& tokens, std::vector<float> scores, int32_t unk_id)
    : scores_(std::move(scores)), unk_id_(unk_id) {
  MPKV_CHECK(scores_.size() == tokens.size(), "tokenizer: " + std::to_string(scores_.size()) + " token scores for " +
                                                  std::to_string(tokens.size()) + " tokens");
  // A NaN score would break the candidates' ordering (a corrupt file, not a model to guess about).
  for (size_t i = 0; i < scores_.size(); ++i) {
    MPKV_CHECK(!std::isnan(scores_[i]), "tokenizer: token " + std::to_string(i) + " has a NaN score");
  }
  ids_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ids_.emplace(tokens[i], static_cast<int32_t>(i));
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    int32_t id = find_token(hex);
    if (id < 0) id = find_token(std::string(1, static_cast<char>(b)));
    byte_token_[b] = id;
  }
}

int32_t SpmMerges::find_token(std::string_view text) const {
  const auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

void SpmMerges::emit_bytes(std::string_view symbol, std::vector<int32_t>& out) const {
  for (const char c : symbol) {
    const auto b = static_cast<uint8_t>(c);
    int32_t id = byte_token_[b];
    if (id < 0) id = unk_id_;
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw Error(std::string("tokenizer: byte ") + hex + " is not in the vocabulary, which has no byte-fallback "
                  "token for it and no unknown token");
    }
    out.push_back(id);
  }
}

void SpmMerges::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // Symbols hold 32-bit offsets and indices.
  MPKV_CHECK(text.size() < (size_t{1} << 31), "tokenizer: a stretch of " + std::to_string(text.size()) +
                                                  " bytes without special tokens is too long to encode (2 GiB at most)");
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const size_t len = std::min(char_length(text[at]), text.size() - at);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(len), index - 1,
                       at + len == text.size() ? -1 : index + 1});
    at += len;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols[left].len + symbols[right].len;
    const int32_t id = find_token(text.substr(symbols[left].offset, size));
    if (id >= 0) queue.push({scores_[id], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // Stale: one side was merged away or grew since this pair was seen.
    if (left.len == 0 || right.len == 0 || left.len + right.len != c.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  // A merged symbol is always a token; a symbol that is not is a single character.
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].len);
    const int32_t id = find_token(piece);
    if (id >= 0) out.push_back(id);
    else emit_bytes(piece, out);
  }
}

}  // namespace mpkv

#include "tokenizer/bpe_merges.h"

#include <queue>

#include "tokenizer/byte_unicode.h"
#include "util/error.h"

namespace mpkv {

BpeMerges::BpeMerges(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  n_vocab_ = static_cast<int32_t>(tokens.size());
  symbol_ids_.reserve(tokens.size() + 1024);
  for (int32_t i = 0; i < n_vocab_; ++i) symbol_ids_.emplace(tokens[i], i);
  n_symbols_ = n_vocab_;
  for (int b = 0; b < 256; ++b) byte_symbol_[b] = intern(byte_to_unicode_utf8(static_cast<uint8_t>(b)));

  merge_table_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    const size_t sp = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    MPKV_CHECK(sp != std::string::npos,
               "tokenizer merge #" + std::to_string(rank) + " '" + line + "' has no space between its two parts");
    const std::string left = line.substr(0, sp), right = line.substr(sp + 1);
    const int32_t a = intern(left), b = intern(right), r = intern(left + right);
    merge_table_.emplace(pair_key(a, b), Merge{static_cast<int32_t>(rank), r});
  }
}

int32_t BpeMerges::intern(const std::string& text) {
  auto [it, inserted] = symbol_ids_.emplace(text, n_symbols_);
  if (inserted) ++n_symbols_;
  return it->second;
}

int32_t BpeMerges::find_token(std::string_view text) const {
  // C++20 heterogeneous lookup needs a transparent hash; words are short, so a copy is fine.
  auto it = symbol_ids_.find(std::string(text));
  return (it != symbol_ids_.end() && it->second < n_vocab_) ? it->second : -1;
}

void BpeMerges::encode_word(std::string_view word, bool ignore_merges, int32_t unk_id,
                            std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const int32_t id = find_token(bytes_to_unicode_text(word));
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // One symbol per byte, doubly linked; a merged-away symbol has id -1.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t begin, len;  // bytes of word covered
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = Symbol{byte_symbol_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
                    static_cast<uint32_t>(i), 1};
  }

  // Candidate merge of adjacent symbols (left, right) as they were when pushed.
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
  };
  const auto worse = [](const Candidate& x, const Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.left > y.left;  // lowest rank, then leftmost, on top
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  const auto push_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto it = merge_table_.find(pair_key(sym[l].id, sym[r].id));
    if (it != merge_table_.end()) queue.push(Candidate{it->second.rank, l, r, sym[l].id, sym[r].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    // Stale when either side was merged away or changed since the candidate was pushed.
    if (l.id != c.left_id || r.id != c.right_id || l.next != c.right) continue;
    l.id = c.result;
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.id = -1;
    push_pair(l.prev, c.left);
    push_pair(c.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const Symbol& s = sym[i];
    if (s.id < n_vocab_) {
      out.push_back(s.id);
      continue;
    }
    for (uint32_t k = s.begin; k < s.begin + s.len; ++k) {
      const int32_t b = byte_symbol_[static_cast<uint8_t>(word[k])];
      if (b < n_vocab_) out.push_back(b);
      else if (unk_id >= 0) out.push_back(unk_id);
    }
  }
}

}  // namespace mpkv

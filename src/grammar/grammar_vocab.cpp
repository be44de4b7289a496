#include "grammar/grammar_vocab.h"

#include "tokenizer/byte_unicode.h"
#include "util/error.h"

namespace mpkv {

namespace {
// "<0xXX>": the shape xgrammar's byte-fallback decoder turns into one byte.
bool byte_token_shape(const std::string& s) { return s.size() == 6 && s.rfind("<0x", 0) == 0 && s.back() == '>'; }

std::string encoded_text(const Tokenizer& tok, int32_t id) {
  const bool bpe = tok.kind() == TokenizerKind::bpe;
  switch (tok.token_type(id)) {
    case TokenType::normal:
    case TokenType::byte: return tok.token_text(id);
    case TokenType::user_defined: {
      const std::string& piece = tok.token_piece(id);
      if (bpe) return bytes_to_unicode_text(piece);
      const bool plain = piece.find("\xE2\x96\x81") == std::string::npos && !byte_token_shape(piece);
      return plain ? piece : std::string();
    }
    case TokenType::control:
    case TokenType::unknown:
    case TokenType::unused:
    case TokenType::undefined: return {};
  }
  return {};
}
}  // namespace

GrammarVocab grammar_vocab(const Tokenizer& tok, int n_vocab) {
  MPKV_CHECK(n_vocab >= tok.n_vocab(), "grammar: the model's vocabulary (" + std::to_string(n_vocab) +
                                           ") is smaller than the tokenizer's (" + std::to_string(tok.n_vocab()) + ")");
  GrammarVocab v;
  v.type = tok.kind() == TokenizerKind::bpe ? xgrammar::VocabType::BYTE_LEVEL : xgrammar::VocabType::BYTE_FALLBACK;
  v.encoded.reserve(tok.n_vocab());
  for (int32_t id = 0; id < tok.n_vocab(); ++id) v.encoded.push_back(tok.is_end_of_generation(id) ? "" : encoded_text(tok, id));
  v.stop_ids = tok.end_of_generation_ids();
  v.vocab_size = n_vocab;
  return v;
}

xgrammar::TokenizerInfo make_tokenizer_info(const GrammarVocab& v) {
  return xgrammar::TokenizerInfo(v.encoded, v.type, v.vocab_size, v.stop_ids, /*add_prefix_space=*/false);
}

}  // namespace mpkv

// mpkv's vocabulary as xgrammar sees it (docs/structured_outputs.md, "Vocabulary"). xgrammar
// decodes each token's stored text by the vocabulary's type and matches the decoded bytes against
// the grammar; a token whose text is empty is "special" and never allowed, and the stop tokens are
// allowed only where the grammar may end. So:
//   bpe (byte-level BPE, SmolLM2): VocabType BYTE_LEVEL; NORMAL tokens as stored (GPT-2 byte code
//       points), USER_DEFINED tokens as their bytes byte-encoded (they are stored raw);
//   spm (SentencePiece with byte fallback, Gemma 3): VocabType BYTE_FALLBACK; NORMAL ("▁" for a
//       space) and BYTE ("<0xXX>") tokens as stored; USER_DEFINED tokens as stored when that decodes
//       to their bytes (no "▁", not a byte token's shape), else special;
//   CONTROL / UNKNOWN / UNUSED / UNDEFINED tokens: special (never text inside an output);
//   stop tokens: the tokenizer's end-of-generation ids; vocab_size: the model's logits width
//       (ids past the tokenizer's vocabulary are special).
// The decoded bytes of every allowed token equal Tokenizer::token_piece (test_grammar_vocab checks
// it on both real models).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <xgrammar/tokenizer_info.h>

#include "tokenizer/tokenizer.h"

namespace mpkv {

struct GrammarVocab {
  std::vector<std::string> encoded;  // one per tokenizer token; "" = special
  xgrammar::VocabType type = xgrammar::VocabType::RAW;
  std::vector<int32_t> stop_ids;
  int vocab_size = 0;
};
// Throws Error when n_vocab is below the tokenizer's vocabulary.
GrammarVocab grammar_vocab(const Tokenizer& tok, int n_vocab);
xgrammar::TokenizerInfo make_tokenizer_info(const GrammarVocab& v);

}  // namespace mpkv

// mpkv::Tokenizer: byte-level BPE (llama.cpp's "gpt2" tokenizer model) built from GGUF metadata.
//
// encode(text):
//   1. special tokens (token type CONTROL / USER_DEFINED / UNKNOWN) are cut out of the text first,
//      longest token text first, as llama.cpp's tokenizer_st_partition does; with
//      parse_special = false only USER_DEFINED tokens are;
//   2. invalid UTF-8 is replaced by U+FFFD per bad byte (llama.cpp does the same);
//   3. each remaining stretch is split by the pre-tokenizer regexes (pre_tokenizer.h);
//   4. each word is BPE-merged (bpe_merges.h); word -> ids is cached within one encode() call.
// decode(ids) concatenates token pieces: NORMAL tokens map their code points back through the
// GPT-2 byte table, BYTE tokens "<0xXX>" give their byte, CONTROL / USER_DEFINED / UNKNOWN tokens
// give their text, UNUSED / UNDEFINED give nothing. decode(encode(x)) == x for valid UTF-8 x.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/bpe_merges.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/pre_tokenizer.h"

namespace mpkv {

class GgufReader;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

// Special token ids; -1 when the model has none.
struct SpecialTokenIds {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t unk = -1;
  int32_t pad = -1;
};

class Tokenizer {
 public:
  // From plain vectors (unit tests, or a caller that parsed metadata itself).
  //   tokens: texts, id = index (an empty text becomes "[EMPTY_<id>]", as in llama.cpp);
  //   types: one per token, or empty for all NORMAL;  merges: "left right" in rank order;
  //   pre: a tokenizer.ggml.pre name;  add_bos: prepend bos() when encode() is not told otherwise;
  //   chat_template: the Jinja text, only read for its default system prompt.
  // Throws Error on duplicate tokens, a types/tokens length mismatch, an unsupported pre name,
  // add_bos without a valid bos id, or a bos/eos id outside the vocabulary.
  Tokenizer(std::vector<std::string> tokens, std::vector<TokenType> types, const std::vector<std::string>& merges,
            const std::string& pre, SpecialTokenIds special, bool add_bos, const std::string& chat_template = "");

  // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,add_bos_token} and
  // tokenizer.chat_template. Throws Error when the model is not "gpt2", the pre name is not
  // supported, or a key has the wrong type or size.
  static Tokenizer from_gguf(const GgufReader& gguf);

  std::vector<int32_t> encode(const std::string& text) const { return encode(text, add_bos_, true); }
  std::vector<int32_t> encode(const std::string& text, bool add_bos, bool parse_special = true) const;

  // Bytes of the concatenated pieces (may end inside a UTF-8 sequence). Throws Error on an id
  // outside [0, n_vocab).
  std::string decode(const std::vector<int32_t>& ids) const;
  // The bytes one token stands for (see the header comment). Throws Error on a bad id.
  const std::string& token_piece(int32_t id) const;
  // The token's text as stored in the vocabulary (byte-encoded for NORMAL tokens).
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Vocabulary id of an exact token text, or -1.
  int32_t find_token(const std::string& text) const;

  int32_t bos() const { return special_.bos; }
  int32_t eos() const { return special_.eos; }
  int32_t unk() const { return special_.unk; }
  int32_t pad() const { return special_.pad; }
  bool add_bos() const { return add_bos_; }
  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& pre_name() const { return pre_.name(); }

  // eos, and every token whose text llama.cpp treats as end of generation (<|im_end|>,
  // <|endoftext|>, <|eot_id|>, <end_of_turn>, ..., and the FIM pad/repo/separator tokens).
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }

  // ChatML (chat_format.h), with the chat template's default system prompt if it has one.
  std::string format_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  const std::optional<std::string>& default_system_prompt() const { return default_system_prompt_; }

 private:
  void check_id(int32_t id) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;       // decoded bytes per token
  SpecialTokenIds special_;
  bool add_bos_ = false;
  PreTokenizer pre_;
  BpeMerges bpe_;
  std::vector<int32_t> special_by_length_;  // CONTROL/USER_DEFINED/UNKNOWN ids, longest text first
  std::vector<int32_t> eog_ids_;            // sorted
  std::vector<bool> is_eog_;
  std::optional<std::string> default_system_prompt_;
};

}  // namespace mpkv

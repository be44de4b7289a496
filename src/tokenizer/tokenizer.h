// mpkv::Tokenizer, built from GGUF metadata, of one of two kinds (tokenizer.ggml.model):
//   "gpt2"  -> TokenizerKind::bpe: byte-level BPE with a regex pre-tokenizer;
//   "llama" -> TokenizerKind::spm: SentencePiece-style merging by token score (spm_merges.h).
// docs/tokenizer.md describes both.
//
// encode(text):
//   1. special tokens (token type CONTROL / USER_DEFINED / UNKNOWN) are cut out of the text first,
//      longest token text first, as llama.cpp's tokenizer_st_partition does; with
//      parse_special = false only USER_DEFINED tokens are (an end-of-generation text such as
//      "</s>" counts as CONTROL even when its type says USER_DEFINED, as in llama.cpp);
//   2. bpe: invalid UTF-8 is replaced by U+FFFD per bad byte (llama.cpp does the same), each
//      remaining stretch is split by the pre-tokenizer regexes (pre_tokenizer.h) and each word is
//      BPE-merged (bpe_merges.h); word -> ids is cached within one encode() call;
//   2. spm: a stretch that follows a special token (or starts the text) gets one leading space when
//      add_space_prefix is set; spaces become U+2581; the stretch is merged by score, characters
//      outside the vocabulary falling back to byte tokens <0xXX>. Invalid UTF-8 is kept as bytes.
// decode(ids) concatenates token pieces: NORMAL tokens map their code points back through the
// GPT-2 byte table (bpe) or turn U+2581 back into a space (spm), BYTE tokens "<0xXX>" give their
// byte, CONTROL / USER_DEFINED / UNKNOWN tokens give their text, UNUSED / UNDEFINED give nothing.
// decode(encode(x)) == x for valid UTF-8 x (spm: when add_space_prefix is off).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/bpe_merges.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_merges.h"

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

// tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece-style).
enum class TokenizerKind { bpe, spm };

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
  //   chat_template: the Jinja text (tokenizer.chat_template), rendered by format_chat (chat_template.h).
  // Throws Error on duplicate tokens, a types/tokens length mismatch, an unsupported pre name,
  // add_bos without a valid bos id, or a bos/eos id outside the vocabulary.
  Tokenizer(std::vector<std::string> tokens, std::vector<TokenType> types, const std::vector<std::string>& merges,
            const std::string& pre, SpecialTokenIds special, bool add_bos, const std::string& chat_template = "");

  // A SentencePiece-style tokenizer: scores one per token (higher merges first); add_space_prefix
  // puts a space before text that starts the input or follows a special token. Throws Error as
  // the constructor above, and when scores and tokens differ in length.
  static Tokenizer sentencepiece(std::vector<std::string> tokens, std::vector<TokenType> types,
                                 std::vector<float> scores, SpecialTokenIds special, bool add_bos,
                                 bool add_space_prefix, const std::string& chat_template = "");

  // Reads tokenizer.ggml.{model,tokens,token_type,*_token_id,add_bos_token} and tokenizer.chat_template;
  // for "gpt2" also tokenizer.ggml.{pre,merges}, for "llama" tokenizer.ggml.{scores,add_space_prefix}
  // (absent keys take llama.cpp's defaults for that model: bos 1, eos 2, unk 0, add_bos and
  // add_space_prefix true). Throws Error for another model, an unsupported pre name, or a key
  // with the wrong type or size.
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
  TokenizerKind kind() const { return kind_; }
  // The pre-tokenizer's name (bpe); empty for spm, which has none.
  const std::string& pre_name() const;
  bool add_space_prefix() const { return add_space_prefix_; }

  // eos, and every token whose text llama.cpp treats as end of generation (<|im_end|>,
  // <|endoftext|>, <|eot_id|>, <end_of_turn>, ..., and the FIM pad/repo/separator tokens).
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }

  // The chat prompt (docs/chat_templates.md): the model's tokenizer.chat_template rendered by
  // llama.cpp's Jinja engine (chat_template.h) when it has one; otherwise a built-in format
  // (chat_format.h: Gemma's turns when the vocabulary has <start_of_turn>, else ChatML). Throws
  // Error when the template does not parse or fails to render, and, without a template, for tools
  // or chat_template_kwargs (the built-in formats have no variables to give them to).
  std::string format_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  std::string format_chat(const ChatTemplateInputs& inputs) const;
  bool has_chat_template() const { return chat_template_ != nullptr || !chat_template_error_.empty(); }
  // The template's source ("" without one, or when it does not parse).
  std::string chat_template_source() const { return chat_template_ ? chat_template_->source() : std::string(); }
  // What format_chat uses, for a one-line note: "the model's chat template (Jinja)", "built-in ChatML", ...
  std::string chat_format_description() const;
  // The built-in format a model without a template gets (and what detect_chat_format says of a template).
  ChatFormat chat_format() const { return chat_format_; }
  const std::optional<std::string>& default_system_prompt() const { return default_system_prompt_; }

 private:
  // What both kinds share: vocabulary checks, end of generation, pieces, the special-token list
  // and the chat format.
  Tokenizer(TokenizerKind kind, std::vector<std::string> tokens, std::vector<TokenType> types,
            SpecialTokenIds special, bool add_bos, const std::string& chat_template);
  void check_id(int32_t id) const;
  // A raw stretch of text [offset, offset + length), or a special token (token >= 0).
  struct Fragment {
    int32_t token;
    size_t offset, length;
  };
  std::vector<Fragment> split_special(const std::string& text, bool parse_special) const;
  void encode_bpe_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_spm_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const;

  TokenizerKind kind_;
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;       // decoded bytes per token
  SpecialTokenIds special_;
  bool add_bos_ = false;
  bool add_space_prefix_ = false;         // spm only
  std::optional<PreTokenizer> pre_;       // bpe only
  std::optional<BpeMerges> bpe_;          // bpe only
  std::optional<SpmMerges> spm_;          // spm only
  std::vector<int32_t> special_by_length_;  // CONTROL/USER_DEFINED/UNKNOWN ids, longest text first
  std::vector<int32_t> eog_ids_;            // sorted
  std::vector<bool> is_eog_;
  ChatFormat chat_format_ = ChatFormat::chatml;
  std::optional<std::string> default_system_prompt_;  // chatml only
  std::shared_ptr<const ChatTemplate> chat_template_;  // null without a template, or when it does not parse
  std::string chat_template_error_;                    // why it does not parse; format_chat throws it
};

}  // namespace mpkv

// Pre-tokenizer: splits text into words before BPE, with the regex sequence llama.cpp uses for a
// given tokenizer.ggml.pre name (src/llama-vocab.cpp, llm_tokenizer_bpe). Each regex is applied in
// turn to every piece produced by the previous one; both the matches and the unmatched stretches
// between them become pieces, and a regex never sees past the end of the piece it is splitting (so
// a lookahead stops there, and `$` matches only at the piece's end). The kinds (PreTokenizerKind),
// with the names that select them, are listed in docs/tokenizer.md ("Pre-tokenizers"):
//   gpt2_digits (smollm, starcoder, ...): "\p{N}" (each digit its own piece), then the GPT-2 regex
//   gpt2:            the GPT-2 regex alone
//   llama3:          one regex, digits in runs of up to 3, case-insensitive contractions
//   qwen2:           like llama3 but each digit alone;  qwen35: qwen2 with letters taking marks
//   deepseek_llm, deepseek_coder, falcon: several regexes in turn (script ranges, punctuation, ...)
// \s and \S are matched against the Unicode White_Space set, as llama.cpp's tables do.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mpkv {

enum class PreTokenizerKind { gpt2_digits, gpt2, llama3, qwen2, qwen35, deepseek_llm, deepseek_coder, falcon };

struct PreTokenizerSpec {
  PreTokenizerKind kind;
  std::vector<std::string> regexes;  // in llama.cpp's spelling, applied in order
  bool ignore_merges = false;        // a word that is itself a vocabulary token is not split (llama3)
  bool add_bos_default = false;      // used when the GGUF has no tokenizer.ggml.add_bos_token
};

// The spec for a tokenizer.ggml.pre name. Throws Error naming the supported names otherwise.
PreTokenizerSpec pre_tokenizer_spec(const std::string& pre_name);

class PreTokenizer {
 public:
  // Compiles the regexes for pre_name with PCRE2 (UTF mode, JIT when available). Throws Error.
  explicit PreTokenizer(const std::string& pre_name);

  const std::string& name() const { return name_; }
  const PreTokenizerSpec& spec() const { return spec_; }

  // Splits valid UTF-8 text (see utf8_sanitize) into non-empty pieces that concatenate back to text.
  // The views point into text.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Regex;
  std::string name_;
  PreTokenizerSpec spec_;
  std::vector<std::shared_ptr<const Regex>> regexes_;  // shared: compiled code is read-only
};

}  // namespace mpkv

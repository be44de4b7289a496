// Pre-tokenizer: splits text into words before BPE, with the regex sequence llama.cpp uses for a
// given tokenizer.ggml.pre name. Each regex is applied in turn to every piece produced by the
// previous one; both the matches and the unmatched stretches between them become pieces, and a
// regex never sees past the end of the piece it is splitting (so a lookahead stops there).
//   smollm (also starcoder, refact, ...): "\p{N}" (each digit its own piece), then the GPT-2 regex
//   llama-bpe (llama3):  one regex, digits in runs of up to 3, case-insensitive contractions
//   qwen2:               like llama3 but each digit alone
// \s and \S are matched against the Unicode White_Space set, as llama.cpp's tables do.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mpkv {

struct PreTokenizerSpec {
  std::string kind;                  // "gpt2-digits", "gpt2", "llama3" or "qwen2"
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

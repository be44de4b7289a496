#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "util/error.h"

namespace mpkv {
namespace {

// Regexes exactly as llama.cpp (src/llama-vocab.cpp, llm_tokenizer_bpe) spells them ("[\r\n]",
// which llama.cpp writes with the control characters themselves, is the same class).
const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen35Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek's regexes have non-ASCII characters; they are written here as \x{...} escapes of the
// very code points llama.cpp's source has (an editor's Unicode normalization could otherwise change
// them: U+1F7D and U+03CE look the same).
// DeepSeek LLM's letters: the cased scripts (Latin, Greek, Cyrillic, Armenian, Georgian, ...).
const char* const kDeepseekLlmLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C})"
    R"(\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5})"
    R"(\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B})"
    R"(\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45})"
    R"(\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4})"
    R"(\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB})"
    R"(\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115})"
    R"(\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139})"
    R"(\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})"
    R"(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
// DeepSeek LLM's punctuation: ASCII, full-width forms, curly quotes, ideographic space and marks.
const char* const kDeepseekLlmPunct = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
// DeepSeek's CJK runs (U+4E00..U+9FA5, U+0800..U+4E00, Hangul U+AC00..U+D7FF).
const char* const kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct PreTokenizerEntry {
  PreTokenizerKind kind;
  std::vector<std::string> names;  // tokenizer.ggml.pre values
  std::vector<std::string> regexes;
  bool ignore_merges = false;
  bool add_bos_default = false;
};

// One row per kind, with the pre names llama.cpp maps to it and the flags it sets for them
// (llama_vocab::impl::load; clean_spaces only affects llama.cpp's detokenizer).
const std::vector<PreTokenizerEntry>& pre_tokenizer_table() {
  static const std::vector<PreTokenizerEntry> table = {
      {PreTokenizerKind::gpt2_digits,
       {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2Regex}},
      {PreTokenizerKind::gpt2, {"gpt-2", "phi-2", "mpt", "olmo"}, {kGpt2Regex}},
      {PreTokenizerKind::llama3, {"llama3", "llama-v3", "llama-bpe"}, {kLlama3Regex}, true, true},
      {PreTokenizerKind::qwen2, {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {kQwen2Regex}},
      {PreTokenizerKind::qwen35, {"qwen35"}, {kQwen35Regex}},
      {PreTokenizerKind::deepseek_llm,
       {"deepseek-llm"},
       {R"([\r\n])", kDeepseekLlmLetters, kDeepseekLlmPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
      {PreTokenizerKind::deepseek_coder,
       {"deepseek-coder"},
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
      {PreTokenizerKind::falcon, {"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Regex, R"([0-9][0-9][0-9])"}},
  };
  return table;
}

// Unicode White_Space (the set llama.cpp's unicode_set_whitespace holds), as a class body.
const char* const kWhiteSpaceClassBody =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S into explicit White_Space classes (PCRE2 10.42's \s under UCP omits U+0085).
std::string expand_whitespace_classes(const std::string& re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char n = re[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpaceClassBody) : "[" + std::string(kWhiteSpaceClassBody) + "]";
      } else if (n == 'S') {
        MPKV_CHECK(!in_class, "pre-tokenizer regex uses \\S inside a class: " + re);
        out += "[^" + std::string(kWhiteSpaceClassBody) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

PreTokenizerSpec pre_tokenizer_spec(const std::string& pre_name) {
  for (const PreTokenizerEntry& e : pre_tokenizer_table()) {
    if (std::find(e.names.begin(), e.names.end(), pre_name) != e.names.end())
      return PreTokenizerSpec{e.kind, e.regexes, e.ignore_merges, e.add_bos_default};
  }
  std::string names;
  for (const PreTokenizerEntry& e : pre_tokenizer_table())
    for (const auto& n : e.names) names += (names.empty() ? "" : ", ") + n;
  throw Error("unsupported pre-tokenizer (tokenizer.ggml.pre) '" + pre_name + "'; supported: " + names);
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& pre_name) : name_(pre_name), spec_(pre_tokenizer_spec(pre_name)) {
  for (const auto& re : spec_.regexes) {
    const std::string pattern = expand_whitespace_classes(re);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto r = std::make_shared<Regex>();
    // DOLLAR_ENDONLY: `$` only at the end of the piece, as in llama.cpp's std::regex (ECMAScript),
    // not also before a final newline as PCRE2 would by default.
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      throw Error("pre-tokenizer '" + pre_name + "': PCRE2 cannot compile regex at offset " + std::to_string(err_off) +
                  ": " + reinterpret_cast<const char*>(msg));
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    regexes_.push_back(std::move(r));
  }
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& re : regexes_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(re->code, nullptr), &pcre2_match_data_free);
    MPKV_CHECK(md, "pre-tokenizer: out of memory for PCRE2 match data");
    for (const std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0;  // next byte of piece not yet emitted
      while (pos < piece.size()) {
        // The subject is the piece alone, so lookaheads end at its end. Input was validated.
        int rc = pcre2_match(re->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(re->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof(msg));
          throw Error("pre-tokenizer '" + name_ + "': PCRE2 match failed: " + reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        size_t start = ov[0], end = ov[1];
        if (end == start) {
          // None of the regexes matches the empty string; guard anyway by stepping one code point.
          end = start + 1;
          while (end < piece.size() && (static_cast<uint8_t>(piece[end]) & 0xC0) == 0x80) ++end;
        }
        if (start > pos) next.push_back(piece.substr(pos, start - pos));  // unmatched stretch
        next.push_back(piece.substr(start, end - start));
        pos = end;
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace mpkv

#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "util/error.h"

namespace mpkv {
namespace {

// Regexes exactly as llama.cpp (src/llama-vocab.cpp, llm_tokenizer_bpe) spells them.
const char* const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

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
  static const std::vector<std::string> gpt2_digits = {"smollm", "starcoder", "refact", "command-r",
                                                       "codeshell", "exaone", "minerva-7b"};
  static const std::vector<std::string> gpt2 = {"gpt-2", "phi-2", "mpt", "olmo"};
  static const std::vector<std::string> llama3 = {"llama3", "llama-v3", "llama-bpe"};
  static const std::vector<std::string> qwen2 = {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"};
  const auto in = [&](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), pre_name) != names.end();
  };
  PreTokenizerSpec s;
  if (in(gpt2_digits)) {
    s.kind = "gpt2-digits";
    s.regexes = {R"(\p{N})", kGpt2Regex};
  } else if (in(gpt2)) {
    s.kind = "gpt2";
    s.regexes = {kGpt2Regex};
  } else if (in(llama3)) {
    s.kind = "llama3";
    s.regexes = {kLlama3Regex};
    s.ignore_merges = true;
    s.add_bos_default = true;
  } else if (in(qwen2)) {
    s.kind = "qwen2";
    s.regexes = {kQwen2Regex};
  } else {
    std::string names;
    for (const auto* list : {&gpt2_digits, &gpt2, &llama3, &qwen2})
      for (const auto& n : *list) names += (names.empty() ? "" : ", ") + n;
    throw Error("unsupported pre-tokenizer (tokenizer.ggml.pre) '" + pre_name + "'; supported: " + names);
  }
  return s;
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
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                            &err, &err_off, nullptr);
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

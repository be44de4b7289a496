#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <deque>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "gguf/gguf_reader.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace mpkv {
namespace {

// Token texts llama.cpp (llama_vocab::impl::load) treats as end of generation, besides eos:
// the end-of-turn/text markers and the FIM pad / repo / file-separator tokens.
const std::unordered_set<std::string>& eog_texts() {
  static const std::unordered_set<std::string> texts = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
      "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "</s>",
      "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek "<｜end▁of▁sentence｜>"
      // FIM pad / repo / file separator
      "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
      "<REPO>", "<reponame>", "<|file_sep|>"};
  return texts;
}

std::vector<std::string> checked_tokens(std::vector<std::string> tokens) {
  MPKV_CHECK(!tokens.empty(), "tokenizer: the vocabulary is empty");
  std::unordered_map<std::string_view, size_t> seen;
  seen.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) tokens[i] = "[EMPTY_" + std::to_string(i) + "]";
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, inserted] = seen.emplace(tokens[i], i);
    MPKV_CHECK(inserted, "tokenizer: duplicate token '" + tokens[i] + "' has ids " + std::to_string(it->second) +
                             " and " + std::to_string(i));
  }
  return tokens;
}

std::vector<TokenType> checked_types(std::vector<TokenType> types, size_t n_tokens) {
  if (types.empty()) return std::vector<TokenType>(n_tokens, TokenType::normal);
  MPKV_CHECK(types.size() == n_tokens, "tokenizer: " + std::to_string(types.size()) + " token types for " +
                                           std::to_string(n_tokens) + " tokens");
  return types;
}

// The bytes a NORMAL token's text stands for: each code point mapped back through the GPT-2 byte
// table; a code point outside the table (not produced by byte encoding) is kept as its UTF-8.
std::string decode_normal_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t len;
    const uint32_t cp = utf8_decode(text, i, len);
    const int b = unicode_to_byte(cp);
    if (b >= 0) out.push_back(static_cast<char>(b));
    else out.append(text, i, len);
    i += len;
  }
  return out;
}

// SentencePiece marks spaces with U+2581 ("\xE2\x96\x81"); a NORMAL token's bytes have them back.
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";
std::string decode_spm_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    if (text.compare(at, kSpmSpace.size(), kSpmSpace) == 0) {
      out.push_back(' ');
      at += kSpmSpace.size();
    } else {
      out.push_back(text[at++]);
    }
  }
  return out;
}

// "<0xAB>" -> byte 0xAB, or -1 when the text is not of that form.
int parse_byte_token(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  const auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> tokens, std::vector<TokenType> types,
                     const std::vector<std::string>& merges, const std::string& pre, SpecialTokenIds special,
                     bool add_bos, const std::string& chat_template)
    : Tokenizer(TokenizerKind::bpe, std::move(tokens), std::move(types), special, add_bos, chat_template) {
  pre_.emplace(pre);
  bpe_.emplace(tokens_, merges);
}

Tokenizer Tokenizer::sentencepiece(std::vector<std::string> tokens, std::vector<TokenType> types,
                                   std::vector<float> scores, SpecialTokenIds special, bool add_bos,
                                   bool add_space_prefix, const std::string& chat_template) {
  Tokenizer t(TokenizerKind::spm, std::move(tokens), std::move(types), special, add_bos, chat_template);
  t.add_space_prefix_ = add_space_prefix;
  t.spm_.emplace(t.tokens_, std::move(scores), t.special_.unk);
  return t;
}

Tokenizer::Tokenizer(TokenizerKind kind, std::vector<std::string> tokens, std::vector<TokenType> types,
                     SpecialTokenIds special, bool add_bos, const std::string& chat_template)
    : kind_(kind),
      tokens_(checked_tokens(std::move(tokens))),
      types_(checked_types(std::move(types), tokens_.size())),
      special_(special),
      add_bos_(add_bos) {
  const int32_t n = n_vocab();
  const auto in_range = [&](int32_t id) { return id >= 0 && id < n; };
  for (auto [name, id] : {std::pair<const char*, int32_t>{"bos", special_.bos}, {"eos", special_.eos}}) {
    MPKV_CHECK(id == -1 || in_range(id), std::string("tokenizer: ") + name + " token id " + std::to_string(id) +
                                             " is outside the vocabulary of " + std::to_string(n));
  }
  // unk / pad outside the vocabulary are dropped, as llama.cpp does (they only matter when present).
  if (!in_range(special_.unk)) special_.unk = -1;
  if (!in_range(special_.pad)) special_.pad = -1;
  MPKV_CHECK(!add_bos_ || special_.bos >= 0, "tokenizer: add_bos_token is true but the model has no bos token id");

  // End of generation: eos plus the texts llama.cpp recognises; those tokens count as CONTROL
  // (llama.cpp adds the CONTROL attribute the same way, even to a USER_DEFINED token) so encode()
  // cuts them out as special tokens only when parsing special tokens.
  is_eog_.assign(n, false);
  if (special_.eos >= 0) is_eog_[special_.eos] = true;
  const auto& texts = eog_texts();
  for (int32_t id = 0; id < n; ++id) {
    if (texts.count(tokens_[id])) {
      is_eog_[id] = true;
      types_[id] = TokenType::control;
    }
  }
  for (int32_t id = 0; id < n; ++id)
    if (is_eog_[id]) eog_ids_.push_back(id);

  pieces_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    switch (types_[id]) {
      case TokenType::normal:
        pieces_[id] = kind_ == TokenizerKind::bpe ? decode_normal_text(tokens_[id]) : decode_spm_text(tokens_[id]);
        break;
      case TokenType::control:
      case TokenType::user_defined:
      case TokenType::unknown: pieces_[id] = tokens_[id]; break;
      case TokenType::byte: {
        const int b = parse_byte_token(tokens_[id]);
        pieces_[id] = b >= 0 ? std::string(1, static_cast<char>(b)) : tokens_[id];
        break;
      }
      default: break;  // UNUSED / UNDEFINED render as nothing (llama.cpp)
    }
    if (types_[id] == TokenType::control || types_[id] == TokenType::user_defined ||
        types_[id] == TokenType::unknown) {
      special_by_length_.push_back(id);
    }
  }
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });

  chat_format_ = detect_chat_format(chat_template, std::find(tokens_.begin(), tokens_.end(), "<start_of_turn>") != tokens_.end());
  if (chat_format_ == ChatFormat::chatml) default_system_prompt_ = chatml_default_system_prompt(chat_template);
  if (!chat_template.empty()) {
    // bos_token / eos_token are the tokens' texts, as llama.cpp's common_token_to_piece(special).
    const auto text = [&](int32_t id) { return id >= 0 ? pieces_[id] : std::string(); };
    try {
      chat_template_ = std::make_shared<const ChatTemplate>(chat_template, text(special_.bos), text(special_.eos), add_bos_);
    } catch (const Error& e) {
      chat_template_error_ = e.what();  // kept for format_chat: a model without chat use still loads
    }
  }
}

namespace {

std::vector<std::string> gguf_string_array(const GgufReader& g, const char* key) {
  const GgufValue& v = g.get(key);
  MPKV_CHECK(v.is_array(), g.path() + ": " + key + " is not an array");
  std::vector<std::string> out;
  out.reserve(v.as_array().size());
  for (const auto& e : v.as_array()) out.push_back(e.as_string());
  return out;
}

// tokenizer.ggml.token_type (optional: all NORMAL without it); at least n_tokens entries.
std::vector<TokenType> gguf_token_types(const GgufReader& g, size_t n_tokens) {
  std::vector<TokenType> types;
  if (!g.has("tokenizer.ggml.token_type")) return types;
  const GgufValue& v = g.get("tokenizer.ggml.token_type");
  MPKV_CHECK(v.is_array(), g.path() + ": tokenizer.ggml.token_type is not an array");
  const auto& arr = v.as_array();
  MPKV_CHECK(arr.size() >= n_tokens, g.path() + ": tokenizer.ggml.token_type has " + std::to_string(arr.size()) +
                                         " entries for " + std::to_string(n_tokens) + " tokens");
  types.reserve(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) {
    const int64_t t = arr[i].as_int();
    types.push_back(t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::undefined);
  }
  return types;
}

// tokenizer.ggml.scores (optional: all 0 without it, as llama.cpp); at least n_tokens entries.
std::vector<float> gguf_token_scores(const GgufReader& g, size_t n_tokens) {
  if (!g.has("tokenizer.ggml.scores")) return std::vector<float>(n_tokens, 0.0f);
  const GgufValue& v = g.get("tokenizer.ggml.scores");
  MPKV_CHECK(v.is_array(), g.path() + ": tokenizer.ggml.scores is not an array");
  const auto& arr = v.as_array();
  MPKV_CHECK(arr.size() >= n_tokens, g.path() + ": tokenizer.ggml.scores has " + std::to_string(arr.size()) +
                                         " entries for " + std::to_string(n_tokens) + " tokens");
  std::vector<float> scores(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) scores[i] = static_cast<float>(arr[i].as_float());
  return scores;
}

// The special ids from metadata; a key that is absent keeps its default.
SpecialTokenIds gguf_special_ids(const GgufReader& g, SpecialTokenIds ids) {
  ids.bos = static_cast<int32_t>(g.get_int("tokenizer.ggml.bos_token_id", ids.bos));
  ids.eos = static_cast<int32_t>(g.get_int("tokenizer.ggml.eos_token_id", ids.eos));
  ids.unk = static_cast<int32_t>(g.get_int("tokenizer.ggml.unknown_token_id", ids.unk));
  ids.pad = static_cast<int32_t>(g.get_int("tokenizer.ggml.padding_token_id", ids.pad));
  return ids;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufReader& g) {
  const std::string model = g.get_string("tokenizer.ggml.model", "");
  MPKV_CHECK(model == "gpt2" || model == "llama",
             g.path() + ": unsupported tokenizer model '" + model +
                 "' (tokenizer.ggml.model); supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece)");
  std::vector<std::string> tokens = gguf_string_array(g, "tokenizer.ggml.tokens");
  std::vector<TokenType> types = gguf_token_types(g, tokens.size());
  const std::string chat_template = g.get_string("tokenizer.chat_template", "");
  try {
    if (model == "llama") {
      std::vector<float> scores = gguf_token_scores(g, tokens.size());
      const SpecialTokenIds ids = gguf_special_ids(g, {.bos = 1, .eos = 2, .unk = 0, .pad = -1});
      return sentencepiece(std::move(tokens), std::move(types), std::move(scores), ids,
                           g.get_bool("tokenizer.ggml.add_bos_token", true),
                           g.get_bool("tokenizer.ggml.add_space_prefix", true), chat_template);
    }
    MPKV_CHECK(g.has("tokenizer.ggml.pre"), "tokenizer.ggml.pre is missing; cannot choose a pre-tokenizer");
    const std::string pre = g.get_string("tokenizer.ggml.pre", "");
    const std::vector<std::string> merges = gguf_string_array(g, "tokenizer.ggml.merges");
    const bool add_bos = g.get_bool("tokenizer.ggml.add_bos_token", pre_tokenizer_spec(pre).add_bos_default);
    return Tokenizer(std::move(tokens), std::move(types), merges, pre, gguf_special_ids(g, {}), add_bos, chat_template);
  } catch (const Error& e) {
    throw Error(g.path() + ": " + e.what());
  }
}

void Tokenizer::check_id(int32_t id) const {
  MPKV_CHECK(id >= 0 && id < n_vocab(),
             "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(n_vocab()));
}

const std::string& Tokenizer::token_piece(int32_t id) const {
  check_id(id);
  return pieces_[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[id];
}

int32_t Tokenizer::find_token(const std::string& text) const {
  return bpe_ ? bpe_->find_token(text) : spm_->find_token(text);
}

const std::string& Tokenizer::pre_name() const {
  static const std::string kNone;
  return pre_ ? pre_->name() : kNone;
}

bool Tokenizer::is_end_of_generation(int32_t id) const { return id >= 0 && id < n_vocab() && is_eog_[id]; }

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_piece(id);
  return out;
}

std::string Tokenizer::format_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  return format_chat(in);
}

std::string Tokenizer::format_chat(const ChatTemplateInputs& in) const {
  if (!chat_template_error_.empty()) throw Error("tokenizer.chat_template: " + chat_template_error_);
  if (chat_template_) return chat_template_->apply(in);
  MPKV_CHECK(in.tools.empty(), "tools need the model's own chat template; this model has no tokenizer.chat_template");
  MPKV_CHECK(in.kwargs.empty(),
             "chat_template_kwargs need the model's own chat template; this model has no tokenizer.chat_template");
  switch (chat_format_) {
    case ChatFormat::gemma: return format_gemma(in.messages, in.add_generation_prompt);
    case ChatFormat::chatml: break;
  }
  return format_chatml(in.messages, in.add_generation_prompt, default_system_prompt_);
}

std::string Tokenizer::chat_format_description() const {
  if (has_chat_template()) return "the model's chat template (tokenizer.chat_template, Jinja)";
  return chat_format_ == ChatFormat::gemma ? "built-in Gemma turns" : "built-in ChatML";
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos) {
    MPKV_CHECK(special_.bos >= 0, "encode: a BOS token was asked for but the model has no bos token id");
    out.push_back(special_.bos);
  }
  if (text.empty()) return out;
  bool after_special = true;  // spm: the start of the text counts as following a special token
  for (const Fragment& f : split_special(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view raw(text.data() + f.offset, f.length);
    switch (kind_) {
      case TokenizerKind::bpe: encode_bpe_text(raw, out); break;
      case TokenizerKind::spm: encode_spm_text(raw, after_special, out); break;
    }
    after_special = false;
  }
  return out;
}

// Cuts special tokens out of the text, longest first.
std::vector<Tokenizer::Fragment> Tokenizer::split_special(const std::string& text, bool parse_special) const {
  std::vector<Fragment> frags{{-1, 0, text.size()}}, next;
  for (int32_t sid : special_by_length_) {
    if (!parse_special && types_[sid] != TokenType::user_defined) continue;
    const std::string& st = tokens_[sid];
    next.clear();
    bool found = false;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw(text.data() + f.offset, f.length);
      size_t pos = 0;
      for (size_t m = raw.find(st); m != std::string_view::npos; m = raw.find(st, pos)) {
        found = true;
        if (m > pos) next.push_back({-1, f.offset + pos, m - pos});
        next.push_back({sid, 0, 0});
        pos = m + st.size();
      }
      if (pos < raw.size()) next.push_back({-1, f.offset + pos, raw.size() - pos});
    }
    if (found) frags.swap(next);
  }
  return frags;
}

// SentencePiece-style: optional leading space, spaces to U+2581, then merging by score.
void Tokenizer::encode_spm_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 2 + kSpmSpace.size());
  if (add_space_prefix_ && after_special) escaped += kSpmSpace;
  for (const char c : text) {
    if (c == ' ') escaped += kSpmSpace;
    else escaped.push_back(c);
  }
  spm_->encode(escaped, out);
}

// Pre-tokenizes and BPE-encodes one stretch of text without special tokens.
void Tokenizer::encode_bpe_text(std::string_view text, std::vector<int32_t>& out) const {
  std::string sanitized;
  if (!utf8_is_valid(text)) {
    sanitized = utf8_sanitize(text);
    text = sanitized;
  }
  // word -> [begin, end) in cached_ids; the views point into text, which outlives the map.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
  std::vector<int32_t> cached_ids;
  const bool ignore_merges = pre_->spec().ignore_merges;
  for (const std::string_view word : pre_->split(text)) {
    auto it = cache.find(word);
    if (it == cache.end()) {
      const auto begin = static_cast<uint32_t>(cached_ids.size());
      bpe_->encode_word(word, ignore_merges, special_.unk, cached_ids);
      it = cache.emplace(word, std::make_pair(begin, static_cast<uint32_t>(cached_ids.size()))).first;
    }
    out.insert(out.end(), cached_ids.begin() + it->second.first, cached_ids.begin() + it->second.second);
  }
}

}  // namespace mpkv

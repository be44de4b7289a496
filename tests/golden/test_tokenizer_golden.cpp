// Gemma 3's SentencePiece tokenizer against llama.cpp's ids (tests/golden/gemma3_tokens.json,
// written by scripts/make_tokenizer_golden.sh): the whole WikiText-2 test file (id count, FNV-1a
// of all ids, and of each block of ids to locate the first difference) and awkward strings (full
// id lists). Skipped when the model is absent. Named test_tokenizer_* so it links only mpkv_tokenizer.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf_reader.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace mpkv {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// text with each U+2581 ("\xE2\x96\x81", SentencePiece's space mark) written as a space: what
// decode(encode(text)) gives, since encode cannot tell a typed U+2581 from an escaped space.
std::string marks_as_spaces(const std::string& text) {
  const std::string_view mark = "\xE2\x96\x81";
  std::string out;
  for (size_t at = 0; at < text.size();) {
    const bool is_mark = std::string_view(text).substr(at, mark.size()) == mark;
    out.push_back(is_mark ? ' ' : text[at]);
    at += is_mark ? mark.size() : 1;
  }
  return out;
}

class GoldenTokens : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = test::gemma_model_path();
    if (path.empty()) return;
    GgufReader g(path);
    tok_ = new Tokenizer(Tokenizer::from_gguf(g));
    golden_ = new json(json::parse(read_file(test::source_path("tests/golden/gemma3_tokens.json"))));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete golden_;
    tok_ = nullptr;
    golden_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << test::kGemmaModelAbsent;
  }
  static Tokenizer* tok_;
  static json* golden_;
};
Tokenizer* GoldenTokens::tok_ = nullptr;
json* GoldenTokens::golden_ = nullptr;

TEST_F(GoldenTokens, Metadata) {
  EXPECT_EQ(tok_->kind(), TokenizerKind::spm);
  EXPECT_EQ(tok_->n_vocab(), 262144);
  EXPECT_EQ(tok_->bos(), 2);
  EXPECT_EQ(tok_->eos(), 1);
  EXPECT_EQ(tok_->unk(), 3);
  EXPECT_EQ(tok_->pad(), 0);
  EXPECT_TRUE(tok_->add_bos());
  EXPECT_FALSE(tok_->add_space_prefix());
  EXPECT_EQ(tok_->chat_format(), ChatFormat::gemma);
  EXPECT_TRUE(tok_->is_end_of_generation(1));    // <eos>
  EXPECT_TRUE(tok_->is_end_of_generation(106));  // <end_of_turn>
  EXPECT_FALSE(tok_->is_end_of_generation(105)); // <start_of_turn>
  EXPECT_EQ(tok_->token_type(212), TokenType::control);  // "</s>": USER_DEFINED, made CONTROL as in llama.cpp
}

TEST_F(GoldenTokens, AwkwardStringsMatchLlamaCpp) {
  size_t n_cases = 0, n_ids = 0;
  for (const json& c : golden_->at("cases")) {
    const std::string text = from_hex(c.at("text_hex").get<std::string>());
    const bool add_bos = c.at("add_bos").get<bool>(), parse_special = c.at("parse_special").get<bool>();
    const Ids expected = c.at("ids").get<Ids>();
    const Ids ids = tok_->encode(text, add_bos, parse_special);
    EXPECT_EQ(ids, expected) << c.at("name").get<std::string>() << " add_bos=" << add_bos
                             << " parse_special=" << parse_special << "\n  mpkv:     " << test::ids_text(ids)
                             << "\n  llama.cpp: " << test::ids_text(expected);
    // Byte fallback covers every byte and add_space_prefix is off, so valid UTF-8 comes back (but
    // for U+2581, see marks_as_spaces). Invalid UTF-8 does not always: a bad lead byte can swallow
    // part of an escaped space, whose bytes then come back as U+2581 (llama.cpp's ids are the same).
    if (!add_bos && utf8_is_valid(text)) {
      EXPECT_EQ(tok_->decode(ids), marks_as_spaces(text)) << c.at("name").get<std::string>();
    }
    ++n_cases;
    n_ids += expected.size();
  }
  EXPECT_GE(n_cases, 300u);
  std::printf("%zu cases, %zu ids matched against llama.cpp\n", n_cases, n_ids);
}

TEST_F(GoldenTokens, Chat) {
  const std::string prompt = tok_->format_chat({{"user", "Hello!"}}, true);
  EXPECT_EQ(prompt, "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n");
  // The "special_turns" case of the golden file is this prompt, with <bos> and the turn markers
  // as single tokens.
  for (const json& c : golden_->at("cases")) {
    if (c.at("name") == "special_turns" && c.at("parse_special").get<bool>()) {
      EXPECT_EQ(from_hex(c.at("text_hex").get<std::string>()), prompt);
      EXPECT_EQ(tok_->encode(prompt, false, true), c.at("ids").get<Ids>());
    }
  }
}

TEST_F(GoldenTokens, WikiTextMatchesLlamaCpp) {
  const std::string path = test::shared_path(golden_->at("text").get<std::string>().substr(std::string("../shared/").size()));
  const std::string text = read_file(path);
  if (text.empty()) GTEST_SKIP() << "WikiText-2 test file absent: " << path;
  const size_t block = golden_->at("block").get<size_t>();
  for (const json& v : golden_->at("wikitext")) {
    const bool add_bos = v.at("add_bos").get<bool>(), parse_special = v.at("parse_special").get<bool>();
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = tok_->encode(text, add_bos, parse_special);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("add_bos=%d parse_special=%d: %zu bytes -> %zu tokens in %.2f s (llama.cpp: %zu)\n", add_bos,
                parse_special, text.size(), ids.size(), secs, v.at("n_ids").get<size_t>());
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(test::fnv1a_ids(ids)));
    const bool same = ids.size() == v.at("n_ids").get<size_t>() && hash == v.at("fnv1a").get<std::string>();
    EXPECT_TRUE(same) << "add_bos=" << add_bos << " parse_special=" << parse_special << ": " << ids.size()
                      << " ids, hash " << hash << "; llama.cpp: " << v.at("n_ids") << " ids, hash " << v.at("fnv1a");
    if (!same) {  // locate the first block that differs and show mpkv's ids there
      const auto& blocks = v.at("block_fnv1a");
      for (size_t b = 0; b < blocks.size(); ++b) {
        const size_t lo = b * block, hi = std::min(ids.size(), lo + block);
        const Ids mine(ids.begin() + std::min(lo, ids.size()), ids.begin() + hi);
        std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(test::fnv1a_ids(mine)));
        if (hash != blocks[b].get<std::string>()) {
          std::string pieces;
          for (int32_t id : mine) pieces.append("[").append(std::to_string(id)).append(" '").append(tok_->token_piece(id)).append("']");
          ADD_FAILURE() << "first difference in ids [" << lo << ", " << lo + block << "): mpkv has " << pieces;
          break;
        }
      }
    }
    const Ids body(ids.begin() + (add_bos ? 1 : 0), ids.end());
    EXPECT_EQ(tok_->decode(body), text);
  }
}

}  // namespace
}  // namespace mpkv

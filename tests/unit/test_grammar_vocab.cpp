// xgrammar's view of the two real vocabularies (src/grammar/grammar_vocab.h): SmolLM2's byte-level
// BPE and Gemma 3's SentencePiece with byte fallback. xgrammar decodes each token's stored text by
// the vocabulary type; every allowed token's decoded bytes must equal mpkv's own decoder
// (Tokenizer::token_piece, itself checked against llama.cpp by the tokenizer goldens), control
// tokens must never be text, and the stop tokens are the end-of-generation ids. Then a JSON schema
// is walked with each model's own tokenization of a valid answer.
#include <gtest/gtest.h>

#include <xgrammar/tokenizer_info.h>

#include "gguf/gguf_reader.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_vocab.h"
#include "grammar/token_matcher.h"
#include "test_support.h"

namespace mpkv {
namespace {

struct Real {
  const char* name;
  std::string (*path)();
  xgrammar::VocabType type;
};

class GrammarVocabReal : public ::testing::TestWithParam<Real> {
 protected:
  void SetUp() override {
    const std::string p = GetParam().path();
    if (p.empty()) GTEST_SKIP() << GetParam().name << " absent (scripts/get_model.sh fetches it)";
    GgufReader g(p);
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(g));
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(GrammarVocabReal, DecodedBytesMatchTheTokenizer) {
  const Tokenizer& t = *tok_;
  const GrammarVocab v = grammar_vocab(t, t.n_vocab());
  EXPECT_EQ(v.type, GetParam().type);
  const xgrammar::TokenizerInfo info = make_tokenizer_info(v);
  const std::vector<std::string>& decoded = info.GetDecodedVocab();
  ASSERT_EQ((int)decoded.size(), t.n_vocab());
  int mismatches = 0, text_tokens = 0;
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    const TokenType type = t.token_type(id);
    const bool text = !v.encoded[id].empty();
    if (type == TokenType::normal || type == TokenType::byte) {
      EXPECT_TRUE(text || t.is_end_of_generation(id)) << id;
    }
    if (type == TokenType::control) {
      EXPECT_FALSE(text) << "control token " << id << " '" << t.token_text(id) << "' is text";
    }
    if (!text) continue;
    ++text_tokens;
    if (decoded[id] != t.token_piece(id) && ++mismatches <= 5)
      ADD_FAILURE() << "token " << id << " '" << t.token_text(id) << "': xgrammar decodes " << testing::PrintToString(decoded[id])
                    << ", mpkv " << testing::PrintToString(t.token_piece(id));
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(text_tokens, t.n_vocab() * 9 / 10);
  EXPECT_EQ(info.GetStopTokenIds(), t.end_of_generation_ids());
}

// The model's own tokens of a valid answer pass the masks one by one, then a stop token ends it.
TEST_P(GrammarVocabReal, SchemaWalkWithTheModelsTokens) {
  const Tokenizer& t = *tok_;
  GrammarCompiler c(t, t.n_vocab());
  const std::string schema =
      R"({"type": "object", "properties": {"city": {"type": "string"}, "temps": {"type": "array", "items": {"type": "number"}},
          "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "temps", "unit"], "additionalProperties": false})";
  const std::string answer = R"({"city": "Zürich ☀", "temps": [12.5, -3], "unit": "celsius"})";
  TokenMatcher m(c.compile({ConstraintKind::json_schema, schema}));
  for (int32_t id : t.encode(answer, /*add_bos=*/false, /*parse_special=*/false)) {
    m.fill_mask();
    ASSERT_TRUE(m.allowed(id)) << "token " << id << " " << testing::PrintToString(t.token_piece(id));
    ASSERT_TRUE(m.accept(id));
  }
  m.fill_mask();
  for (int32_t id = 0; id < t.n_vocab(); ++id)
    EXPECT_EQ(m.allowed(id), t.is_end_of_generation(id)) << "after the object: token " << id;
  EXPECT_TRUE(m.accept(t.end_of_generation_ids().front()));
  EXPECT_TRUE(m.terminated());
}

INSTANTIATE_TEST_SUITE_P(Models, GrammarVocabReal,
                         ::testing::Values(Real{"SmolLM2", test::default_model_path, xgrammar::VocabType::BYTE_LEVEL},
                                           Real{"Gemma3", test::gemma_model_path, xgrammar::VocabType::BYTE_FALLBACK}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mpkv

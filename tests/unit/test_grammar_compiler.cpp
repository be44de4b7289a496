// GrammarCompiler (src/grammar/grammar_compiler.h) and TokenMatcher (token_matcher.h) on a
// byte-level vocabulary: every kind of constraint, the masks it gives (compared with the token sets
// written out here), stop tokens only where the grammar may end, the cache, the size limit, the
// timeout (counted from a compile's start) and refused inputs.
#include <gtest/gtest.h>

#include <future>
#include <set>
#include <thread>

#include "grammar/constraint_error.h"
#include "grammar/grammar_compiler.h"
#include "grammar/token_matcher.h"
#include "test_grammar_support.h"

namespace mpkv {
namespace {

constexpr int kVocab = 300;

const Tokenizer& tok() {
  static const Tokenizer t = test::byte_tokenizer(kVocab);
  return t;
}

GrammarCompiler& compiler() {
  static GrammarCompiler c(tok(), kVocab);
  return c;
}

std::set<int32_t> allowed_set(const TokenMatcher& m) {
  std::set<int32_t> s;
  for (int32_t t = 0; t < m.vocab_size(); ++t)
    if (m.allowed(t)) s.insert(t);
  return s;
}

// Feeds text byte by byte (token = byte); every byte must be in the mask before it is accepted.
void feed(TokenMatcher& m, const std::string& text) {
  for (unsigned char c : text) {
    m.fill_mask();
    ASSERT_TRUE(m.allowed(c)) << "byte '" << c << "' of \"" << text << "\" not allowed";
    ASSERT_TRUE(m.accept(c));
  }
}

TEST(GrammarCompiler, ChoiceMasksExactlyTheFirstBytesAndStopsOnlyAtTheEnd) {
  TokenMatcher m(compiler().compile(choice_constraint({"yes", "no", "n/a"})));
  m.fill_mask();
  EXPECT_EQ(allowed_set(m), (std::set<int32_t>{'n', 'y'}));
  feed(m, "n");
  m.fill_mask();
  EXPECT_EQ(allowed_set(m), (std::set<int32_t>{'o', '/'}));
  feed(m, "o");
  m.fill_mask();
  EXPECT_EQ(allowed_set(m), (std::set<int32_t>{test::kByteEos}));  // "no" is complete: only the stop token
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.accept(test::kByteEos));
  EXPECT_TRUE(m.terminated());
}

TEST(GrammarCompiler, RefusedTokenChangesNothing) {
  TokenMatcher m(compiler().compile({ConstraintKind::regex, "[ab]{2}"}));
  EXPECT_FALSE(m.accept('c'));
  EXPECT_FALSE(m.accept(test::kByteEos));  // not before the grammar may end
  EXPECT_FALSE(m.accept(256));             // a control token is never text
  feed(m, "ab");
  EXPECT_TRUE(m.accept(test::kByteEos));
}

// Check-first sampling rests on this (docs/structured_outputs.md, "Masks in the engine"): at every
// position of a valid answer, accept(t) without the position's mask (a fresh matcher fed the prefix
// by accept alone) takes exactly the tokens the mask allows, the stop token only where the grammar
// may end, the special tokens never; a maxLength schema (masks xgrammar cannot precompute) included.
TEST(GrammarCompiler, AcceptWithoutTheMaskTakesExactlyTheMasksTokens) {
  struct Walk {
    Constraint c;
    std::string answer;
    std::set<size_t> ends;  // positions where the grammar may end
  };
  std::vector<Walk> walks;
  walks.push_back({Constraint{ConstraintKind::json_schema, R"({"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2})"},
                   R"(["ab", "xyz"])", {13}});
  walks.push_back({choice_constraint({"yes", "no", "n/a"}), "n/a", {3}});
  walks.push_back({Constraint{ConstraintKind::regex, "[0-9]{1,3}(px|em)?"}, "42px", {1, 2, 4}});
  for (const auto& [c, answer, ends] : walks) {
    const auto g = compiler().compile(c);
    TokenMatcher with_mask(g);
    for (size_t pos = 0; pos <= answer.size(); ++pos) {
      with_mask.fill_mask();
      int n_allowed = 0;
      for (int32_t t = 0; t < kVocab; ++t) {
        TokenMatcher fresh(g);
        for (size_t i = 0; i < pos; ++i) ASSERT_TRUE(fresh.accept((unsigned char)answer[i]));
        ASSERT_EQ(fresh.accept(t), with_mask.allowed(t)) << c.text << " at " << pos << ", token " << t;
        n_allowed += with_mask.allowed(t);
      }
      EXPECT_GT(n_allowed, 0);
      EXPECT_EQ(with_mask.allowed(test::kByteEos), ends.count(pos) > 0) << c.text << " at " << pos;
      if (pos < answer.size()) {
        ASSERT_TRUE(with_mask.accept((unsigned char)answer[pos]));
      }
    }
  }
}

// A special token is refused without xgrammar seeing it (xgrammar logs a warning for each).
TEST(GrammarCompiler, SpecialTokensAreRefusedSilently) {
  TokenMatcher m(compiler().compile(Constraint{ConstraintKind::regex, "a+"}));
  testing::internal::CaptureStderr();
  EXPECT_FALSE(m.accept(256));  // <|im_start|>: CONTROL
  EXPECT_FALSE(m.accept(299));  // "<filler299>": text the grammar refuses (silently too)
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(m.accept('a'));
}

// A rule with a token budget (xgrammar's [max_tokens=N]): a mask there decides what the next accept
// does, so such a grammar never accepts before its mask; grammars without budgets do.
TEST(GrammarCompiler, TokenBudgetsNeedTheMaskFirst) {
  TokenMatcher budget(compiler().compile(Constraint{ConstraintKind::grammar, "root ::= r \".\"\nr[max_tokens=2] ::= [a-z]+"}));
  EXPECT_FALSE(budget.accepts_before_mask());
  TokenMatcher plain(compiler().compile(Constraint{ConstraintKind::grammar, "root ::= r \".\"\nr ::= [a-z]+"}));
  EXPECT_TRUE(plain.accepts_before_mask());
  EXPECT_TRUE(TokenMatcher(compiler().compile(choice_constraint({"max_tokens"}))).accepts_before_mask());
}

TEST(GrammarCompiler, JsonSchemaFollowsPropertyOrderAndTypes) {
  const std::string schema = R"({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"enum": ["x", "y"]}},
                                 "required": ["b", "a"], "additionalProperties": false})";
  TokenMatcher m(compiler().compile({ConstraintKind::json_schema, schema}));
  feed(m, R"({"b": 12, "a": "y"})");  // b first, as the schema lists it
  m.fill_mask();
  EXPECT_EQ(allowed_set(m), (std::set<int32_t>{test::kByteEos}));
  TokenMatcher wrong(compiler().compile({ConstraintKind::json_schema, schema}));
  feed(wrong, R"({")");
  EXPECT_FALSE(wrong.accept('a'));  // "a" may not come first
  feed(wrong, R"(b": )");
  EXPECT_FALSE(wrong.accept('"'));  // b is an integer
}

TEST(GrammarCompiler, JsonObjectAndGbnf) {
  TokenMatcher obj(compiler().compile({ConstraintKind::json_object, ""}));
  obj.fill_mask();
  EXPECT_EQ(allowed_set(obj), (std::set<int32_t>{'{'}));
  feed(obj, R"({"k": [1, {"z": null}]})");
  EXPECT_TRUE(obj.accept(test::kByteEos));
  TokenMatcher g(compiler().compile({ConstraintKind::grammar, "root ::= \"x\" digit+\ndigit ::= [0-9]"}));
  feed(g, "x42");
  g.fill_mask();
  std::set<int32_t> next = allowed_set(g);
  EXPECT_EQ(next.size(), 11u);  // another digit or the end
  EXPECT_TRUE(next.count(test::kByteEos));
}

TEST(GrammarCompiler, ChoiceLiteralsAreEscaped) {
  TokenMatcher m(compiler().compile(choice_constraint({"a\"b\\c\nd"})));
  feed(m, "a\"b\\c\nd");
  EXPECT_TRUE(m.accept(test::kByteEos));
}

TEST(GrammarCompiler, CacheByKindAndText) {
  GrammarCompiler c(tok(), kVocab);
  const Constraint k{ConstraintKind::regex, "[0-9]+"};
  auto a = c.compile(k);
  auto b = c.compile(k);
  EXPECT_EQ(a.get(), b.get());
  auto other = c.compile({ConstraintKind::grammar, "root ::= [0-9]+"});
  EXPECT_NE(a.get(), other.get());
  const GrammarCompilerStats s = c.stats();
  EXPECT_EQ(s.requests_total, 3u);
  EXPECT_EQ(s.cache_hits_total, 1u);
  EXPECT_EQ(s.compiles_total, 2u);
  EXPECT_EQ(s.cached, 2u);
  EXPECT_GT(s.compile_seconds_total, 0.0);
}

TEST(GrammarCompiler, RefusesBadInput) {
  GrammarCompiler c(tok(), kVocab);
  const std::vector<Constraint> bad = {
      {ConstraintKind::json_schema, "{not json"},
      {ConstraintKind::json_schema, R"({"type": "object", "properties": {"t": {"type": "array", "uniqueItems": true}}})"},
      {ConstraintKind::json_schema, R"({"$defs": {"n": {"type": "object", "properties": {"k": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"})"},
      {ConstraintKind::regex, "(unclosed"},
      {ConstraintKind::grammar, "root ::= undefined_rule"},
      {ConstraintKind::choice, "[]"},
  };
  for (const Constraint& k : bad) EXPECT_THROW(c.compile(k), ConstraintError) << k.text;
  EXPECT_EQ(c.stats().errors_total, bad.size());
  // Refused twice the same way (the failure is cached, not retried).
  EXPECT_THROW(c.compile(bad[3]), ConstraintError);
}

TEST(GrammarCompiler, SizeLimit) {
  GrammarCompilerOptions o;
  o.max_text_bytes = 64;
  GrammarCompiler c(tok(), kVocab, o);
  EXPECT_THROW(c.compile({ConstraintKind::regex, std::string(65, 'a')}), ConstraintError);
  EXPECT_NO_THROW(c.compile({ConstraintKind::regex, std::string(64, 'a')}));
}

// The timeout bounds a compile's own time: a caller of a compile running past it is refused (400,
// not busy); a caller whose compile is still queued behind it is busy (503, retry), not "too slow".
// Both compiles go on and are cache hits once done. The running compile is held by the test hook,
// so nothing depends on how fast the machine is.
TEST(GrammarCompiler, TimeoutCountsFromTheCompilesStartThenCaches) {
  const Constraint a{ConstraintKind::json_schema, R"({"type": "object", "properties": {"q": {"type": "string"}}})"};
  const Constraint b{ConstraintKind::regex, "[ab]+"};
  test::Latch held, release;
  GrammarCompilerOptions o;
  o.compile_timeout = std::chrono::milliseconds(100);
  o.test_before_compile = [&](const Constraint& k) {
    if (k.text != a.text) return;
    held.set();
    release.wait(std::chrono::seconds(60));
  };
  GrammarCompiler c(tok(), kVocab, o);
  std::future<void> first;
  struct Release {  // let the held compile go whatever happens (before `first` is waited for)
    test::Latch& l;
    ~Release() { l.set(); }
  } guard{release};
  first = std::async(std::launch::async, [&] {
    try {
      c.compile(a);
    } catch (const ConstraintError&) {  // too slow, or busy if the worker started late: either is right
    }
  });
  ASSERT_TRUE(held.wait(std::chrono::seconds(60))) << "the compile never started";
  try {
    c.compile(a);  // running (held) past the timeout
    FAIL() << "a compile held past the timeout was accepted";
  } catch (const ConstraintError& e) {
    EXPECT_NE(std::string(e.what()).find("took longer than 100 ms"), std::string::npos) << e.what();
    EXPECT_FALSE(e.busy());
  }
  try {
    c.compile(b);  // queued behind the held one: its own compile has not started
    FAIL() << "a compile queued behind a held one was accepted";
  } catch (const ConstraintError& e) {
    EXPECT_TRUE(e.busy()) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not start within 100 ms"), std::string::npos) << e.what();
  }
  release.set();
  first.get();
  for (int i = 0; i < 2000 && c.stats().compiles_total < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(c.stats().compiles_total, 2u);
  EXPECT_NO_THROW(c.compile(a));  // ready now: no wait
  EXPECT_NO_THROW(c.compile(b));
  EXPECT_GE(c.stats().timeouts_total, 1u);
}

TEST(GrammarCompiler, VocabularyWidthAboveTheTokenizers) {
  GrammarCompiler c(tok(), kVocab + 20);  // padded logits rows: the extra ids are never allowed
  TokenMatcher m(c.compile({ConstraintKind::regex, ".+"}));
  m.fill_mask();
  for (int32_t t = kVocab; t < kVocab + 20; ++t) EXPECT_FALSE(m.allowed(t)) << t;
  EXPECT_TRUE(m.allowed('z'));
  EXPECT_THROW(GrammarCompiler(tok(), kVocab - 1), Error);
}

}  // namespace
}  // namespace mpkv
